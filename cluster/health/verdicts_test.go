package health

import (
	"testing"
	"time"
)

func wedged(id WorkerID) Verdict { return Verdict{Worker: id, Kind: VerdictWedged, Since: t0} }

func TestRemoteVerdictMakesWorkerIneligibleUntilWithdrawn(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 2)...)
	changes := changeCounter(m)
	m.SetRemoteVerdicts("replica-b", []Verdict{wedged(1)})
	if m.Eligible(1) || status(t, m, 1).RemoteVerdicts != 1 {
		t.Fatalf("worker under a remote verdict: eligible %v, status %+v", m.Eligible(1), status(t, m, 1))
	}
	if !m.Eligible(2) {
		t.Fatal("a verdict on worker 1 made worker 2 ineligible")
	}
	if st := status(t, m, 1); st.Circuit != CircuitClosed || st.Wedged {
		t.Fatalf("a remote verdict changed local state: %+v", st)
	}
	if len(m.Verdicts()) != 0 {
		t.Fatalf("remote verdicts reported as this replica's own: %v", m.Verdicts())
	}
	m.Tick()
	if changes.Load() != 1 {
		t.Fatalf("OnChange calls after the verdict = %d, want 1", changes.Load())
	}
	m.SetRemoteVerdicts("replica-b", []Verdict{{Worker: 2, Kind: VerdictDegraded}})
	if !m.Eligible(1) || m.Eligible(2) {
		t.Fatalf("after replica-b's next report: eligible(1) %v eligible(2) %v, want true false",
			m.Eligible(1), m.Eligible(2))
	}
	m.SetRemoteVerdicts("replica-b", nil)
	if !m.Eligible(2) {
		t.Fatal("an empty report did not withdraw the verdict")
	}
	m.Tick()
	if changes.Load() != 2 {
		t.Fatalf("OnChange calls after withdrawals = %d, want 2 (coalesced)", changes.Load())
	}
}

func TestEveryOriginMustWithdraw(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 1)...)
	m.SetRemoteVerdicts("replica-b", []Verdict{wedged(1)})
	m.SetRemoteVerdicts("replica-c", []Verdict{wedged(1), {Worker: 1, Kind: VerdictDegraded}})
	if got := status(t, m, 1).RemoteVerdicts; got != 2 {
		t.Fatalf("RemoteVerdicts = %d, want 2 (one per origin)", got)
	}
	m.SetRemoteVerdicts("replica-b", nil)
	if m.Eligible(1) {
		t.Fatal("eligible while replica-c still holds a verdict")
	}
	m.ForgetOrigin("replica-c")
	if !m.Eligible(1) {
		t.Fatal("not eligible after the last origin was forgotten")
	}
	if got := m.RemoteOrigins(); len(got) != 0 {
		t.Fatalf("RemoteOrigins() = %v, want none", got)
	}
}

func TestRemoteVerdictAppliesToWorkerAddedLater(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 1)...)
	m.SetRemoteVerdicts("replica-b", []Verdict{wedged(2)})
	if err := m.SetWorkers(targets(t, 2)); err != nil {
		t.Fatal(err)
	}
	if m.Eligible(2) {
		t.Fatal("worker added after a verdict against it is eligible")
	}
}

func TestUnknownVerdictKindIgnored(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 1)...)
	m.SetRemoteVerdicts("replica-b", []Verdict{{Worker: 1, Kind: 0}, {Worker: 1, Kind: 77}})
	if !m.Eligible(1) {
		t.Fatal("a verdict of unknown kind made the worker ineligible")
	}
}

func TestOwnVerdictsSurviveRemoteOnes(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	a := begin(t, m, 1)
	defer a.End(OutcomeCanceled)
	clock.Advance(2 * time.Minute)
	m.Tick()
	m.SetRemoteVerdicts("replica-b", []Verdict{wedged(1)})
	m.ForgetOrigin("replica-b")
	if got := m.Verdicts(); len(got) != 1 || got[0].Kind != VerdictWedged {
		t.Fatalf("own verdicts after a remote origin came and went: %v", got)
	}
	if m.Eligible(1) {
		t.Fatal("forgetting a remote origin cleared this replica's own wedge")
	}
}
