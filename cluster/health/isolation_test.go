package health

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	testingclock "k8s.io/utils/clock/testing"
)

// peers is a PeerContact the test sets: how long no peer was heard, and
// whether any is expected.
type peers struct {
	silent   atomic.Int64
	expected atomic.Bool
}

func (p *peers) contact() (time.Duration, bool) {
	return time.Duration(p.silent.Load()), p.expected.Load()
}

func isolationMonitor(t *testing.T, workers ...*fakeWorker) (*Monitor, *testingclock.FakeClock, *peers) {
	var ts []Target
	for i, fw := range workers {
		ts = append(ts, Target{ID: WorkerID(i + 1), URL: fw.url})
	}
	m, clock := newTestMonitor(t, testConfig(), ts...)
	p := &peers{}
	p.expected.Store(true)
	m.SetPeerContact(p.contact)
	return m, clock, p
}

// rounds runs n probe rounds, an Interval apart.
func rounds(t *testing.T, m *Monitor, clock *testingclock.FakeClock, n int) {
	for range n {
		clock.Step(m.cfg.Interval)
		checkRound(t, m)
	}
}

func TestAReplicaThatHearsNoPeerAndNoWorkerKeepsItsWorkers(t *testing.T) {
	w1, w2 := startFakeWorker(t), startFakeWorker(t)
	m, clock, p := isolationMonitor(t, w1, w2)
	// This replica's network goes: every worker fails, every peer is quiet.
	p.silent.Store(int64(time.Hour * 24))
	w1.code.Store(fasthttp.StatusServiceUnavailable)
	w2.code.Store(fasthttp.StatusServiceUnavailable)
	rounds(t, m, clock, m.cfg.FailureThreshold+2)
	for id := WorkerID(1); id <= 2; id++ {
		if st := status(t, m, id); !st.Healthy || !st.Eligible {
			t.Fatalf("worker %d after %d failed rounds while cut off: %+v, want still healthy", id, m.cfg.FailureThreshold+2, st)
		}
	}
	if !m.CutOff() {
		t.Fatal("CutOff() = false while no peer and no worker answers")
	}
	// The network comes back: a peer is heard, and every worker is probed again at once.
	w1.code.Store(fasthttp.StatusOK)
	w2.code.Store(fasthttp.StatusOK)
	p.silent.Store(0)
	m.judge.isolation.checkContact(m.now())
	if m.CutOff() {
		t.Fatal("CutOff() = true once a peer was heard again")
	}
	select {
	case <-m.judge.isolation.recheck:
	default:
		t.Fatal("no probe round asked for when a peer was heard again")
	}
}

func TestAWorkerThatAnswersEndsTheIsolationAndTheDeadOneIsCounted(t *testing.T) {
	alive, dead := startFakeWorker(t), startFakeWorker(t)
	m, clock, p := isolationMonitor(t, alive, dead)
	p.silent.Store(int64(time.Hour * 24)) // every peer died, say
	dead.code.Store(fasthttp.StatusServiceUnavailable)
	rounds(t, m, clock, m.cfg.FailureThreshold)
	if st := status(t, m, 2); st.Healthy {
		t.Fatalf("a dead worker beside one that answers: %+v, want unhealthy: this replica is not cut off", st)
	}
	if st := status(t, m, 1); !st.Healthy {
		t.Fatalf("the worker that answers: %+v", st)
	}
	if m.CutOff() {
		t.Fatal("CutOff() = true while a worker answers")
	}
}

func TestALoneReplicaCountsEveryFailure(t *testing.T) {
	w1 := startFakeWorker(t)
	m, clock, p := isolationMonitor(t, w1)
	p.expected.Store(false) // no peers to hear from
	w1.code.Store(fasthttp.StatusServiceUnavailable)
	rounds(t, m, clock, m.cfg.FailureThreshold)
	if st := status(t, m, 1); st.Healthy {
		t.Fatalf("a lone replica's only worker failing: %+v, want unhealthy", st)
	}
}

func TestRequestFailuresWhileCutOffDoNotOpenTheCircuit(t *testing.T) {
	w1 := startFakeWorker(t)
	m, clock, p := isolationMonitor(t, w1)
	p.silent.Store(int64(time.Hour * 24))
	clock.Step(2 * m.cfg.Interval) // no worker answered in the last round either
	finish(t, m, 1, m.cfg.CBFailureThreshold+1, OutcomeFailure)
	if st := status(t, m, 1); !st.Eligible {
		t.Fatalf("after %d failed requests while cut off: %+v, want eligible", m.cfg.CBFailureThreshold+1, st)
	}
}

// TestAFailureBegunWhileCutOffIsNotCountedWhenItEndsAfterContactReturns: a
// probe that started while no peer was heard and failed just after one was
// heard again failed on this replica's side (a lookup or a connect that
// hung meanwhile); one that started after contact returned counts.
func TestAFailureBegunWhileCutOffIsNotCountedWhenItEndsAfterContactReturns(t *testing.T) {
	w1 := startFakeWorker(t)
	m, clock, p := isolationMonitor(t, w1)
	clock.Step(2 * m.cfg.Interval) // the last answer is a round and more behind
	p.silent.Store(int64(time.Second))
	m.judge.isolation.checkContact(m.now()) // the peers went quiet a second ago
	began := m.now()
	clock.Step(time.Second)
	p.silent.Store(0)
	m.judge.isolation.checkContact(m.now()) // a peer is heard again
	clock.Step(time.Millisecond)
	if !m.judge.isolation.isolated(began, m.now()) {
		t.Fatal("a failure begun while cut off, ending after contact returned, was counted")
	}
	if m.judge.isolation.isolated(m.now(), m.now()+int64(time.Millisecond)) {
		t.Fatal("a failure begun after contact returned was not counted")
	}
}
