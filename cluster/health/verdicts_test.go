package health

import (
	"testing"
	"time"
)

func wedged(id WorkerID) Verdict { return Verdict{Worker: id, Kind: VerdictWedged, Since: t0} }

// fromAQuorum has two other replicas report vs: with this one, three are
// live, and two of them are a quorum.
func fromAQuorum(m *Monitor, vs []Verdict) {
	m.SetRemoteVerdicts("replica-b", vs)
	m.SetRemoteVerdicts("replica-c", vs)
}

// TestALoneOriginIsNoQuorumBeforeTheLiveCountIsKnown: a replica that has
// not yet counted its live peers still counts the origin it hears from, so
// one stranger's verdict never takes a worker out.
func TestALoneOriginIsNoQuorumBeforeTheLiveCountIsKnown(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 1)...)
	m.SetRemoteVerdicts("stranger", []Verdict{wedged(1)})
	if !m.Eligible(1) {
		t.Fatal("one origin's verdict took the worker out before the live count was known")
	}
}

func TestRemoteVerdictMakesWorkerIneligibleUntilWithdrawn(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 2)...)
	changes := changeCounter(m)
	fromAQuorum(m, []Verdict{wedged(1)})
	if m.Eligible(1) || status(t, m, 1).RemoteVerdicts != 2 {
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
	fromAQuorum(m, []Verdict{{Worker: 2, Kind: VerdictDegraded}})
	if !m.Eligible(1) || m.Eligible(2) {
		t.Fatalf("after the quorum's next reports: eligible(1) %v eligible(2) %v, want true false",
			m.Eligible(1), m.Eligible(2))
	}
	fromAQuorum(m, nil)
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
	m.SetRemoteVerdicts("replica-d", []Verdict{wedged(1)})
	if got := status(t, m, 1).RemoteVerdicts; got != 3 {
		t.Fatalf("RemoteVerdicts = %d, want 3 (one per origin)", got)
	}
	m.SetRemoteVerdicts("replica-b", nil)
	if m.Eligible(1) {
		t.Fatal("eligible while replica-c and replica-d, two of three live, still hold a verdict")
	}
	m.ForgetOrigin("replica-c")
	if !m.Eligible(1) {
		t.Fatal("replica-d alone, one of two live, kept the worker out")
	}
	m.ForgetOrigin("replica-d")
	if got := m.RemoteOrigins(); len(got) != 0 {
		t.Fatalf("RemoteOrigins() = %v, want none", got)
	}
}

func TestRemoteVerdictAppliesToWorkerAddedLater(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 1)...)
	fromAQuorum(m, []Verdict{wedged(2)})
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
	clock.Step(2 * time.Minute)
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
