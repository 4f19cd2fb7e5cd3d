package health

import (
	"fmt"
	"testing"
	"time"
)

func TestQuorumOfLiveReplicas(t *testing.T) {
	for live, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		if got := quorum(live); got != want {
			t.Errorf("quorum(%d) = %d, want %d", live, got, want)
		}
	}
}

func TestOneRemoteVerdictOfThreeReplicasIsNotEnough(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 1)...)
	m.SetLiveReplicas(3)
	m.SetRemoteVerdicts("replica-b", []Verdict{wedged(1)})
	if st := status(t, m, 1); !m.Eligible(1) || st.RemoteOut || st.RemoteVerdicts != 1 {
		t.Fatalf("one verdict of three live replicas: eligible %v, status %+v; want eligible", m.Eligible(1), st)
	}
	m.SetRemoteVerdicts("replica-c", []Verdict{{Worker: 1, Kind: VerdictDegraded}})
	if m.Eligible(1) || !status(t, m, 1).RemoteOut {
		t.Fatal("verdicts of two of three live replicas did not take the worker out")
	}
	m.SetLiveReplicas(5)
	if !m.Eligible(1) {
		t.Fatal("two of five live replicas took the worker out")
	}
	m.SetLiveReplicas(4)
	if !m.Eligible(1) {
		t.Fatal("two of four live replicas took the worker out")
	}
}

func TestTwoReplicasNeedThisOnesEvidence(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	m.SetLiveReplicas(2)
	m.SetRemoteVerdicts("replica-b", []Verdict{wedged(1)})
	if !m.Eligible(1) {
		t.Fatal("the other of two replicas took the worker out alone")
	}
	a := begin(t, m, 1)
	defer a.End(OutcomeCanceled)
	clock.Step(29 * time.Second)
	m.Tick()
	if !m.Eligible(1) {
		t.Fatal("29s of silence here (under half the wedge timeout) counted as agreeing")
	}
	clock.Step(time.Second)
	m.Tick()
	if m.Eligible(1) || !status(t, m, 1).RemoteOut {
		t.Fatal("a remote wedge verdict and half the wedge timeout of silence here did not take the worker out")
	}
	if status(t, m, 1).Wedged {
		t.Fatal("this replica's evidence short of a verdict was reported as its own verdict")
	}
	a.Progress(1)
	m.Tick()
	if !m.Eligible(1) {
		t.Fatal("the worker answered here, yet one remote verdict still keeps it out")
	}
}

func TestRemoteDegradeVerdictAgreesWithSlowSamplesHere(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(t, 3)...)
	m.SetLiveReplicas(3)
	stream(t, m, clock, 1, 5, 50, time.Second)
	stream(t, m, clock, 2, 5, 50, time.Second)
	m.SetRemoteVerdicts("replica-b", []Verdict{{Worker: 3, Kind: VerdictDegraded}})
	m.SetRemoteVerdicts("replica-c", []Verdict{wedged(2)})
	m.Tick()
	if !m.Eligible(3) || !m.Eligible(2) {
		t.Fatal("one remote verdict each took workers out with no evidence here")
	}
	stream(t, m, clock, 3, 1, 10, 10*time.Second) // one slow sample: too few for a verdict here
	m.Tick()
	if status(t, m, 3).Degraded {
		t.Fatal("one sample made a degrade verdict of this replica's own")
	}
	if m.Eligible(3) {
		t.Fatal("a remote degrade verdict and a slow sample here did not take the worker out")
	}
	if !m.Eligible(2) {
		t.Fatal("slow samples on worker 3 counted as evidence against worker 2")
	}
}

func TestManyForgedOriginsCannotOutvoteTheLiveCount(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 2)...)
	m.SetLiveReplicas(7)
	for i := range 3 {
		m.SetRemoteVerdicts(fmt.Sprintf("r%d", i), []Verdict{wedged(1), wedged(2)})
	}
	if !m.Eligible(1) || !m.Eligible(2) {
		t.Fatal("three of seven live replicas took workers out")
	}
	m.SetRemoteVerdicts("r3", []Verdict{wedged(1)})
	if m.Eligible(1) || !m.Eligible(2) {
		t.Fatalf("four of seven: eligible(1) %v eligible(2) %v, want false true", m.Eligible(1), m.Eligible(2))
	}
	m.ForgetOrigin("r0")
	if !m.Eligible(1) {
		t.Fatal("a forgotten origin still counted toward the quorum")
	}
}
