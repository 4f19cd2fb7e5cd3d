package health

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/virtualclock"
)

// The judge alone, on virtual time: no sockets, no Monitor, no goroutine.
// Each test moves the clock and hands the judge the events the prober, the
// scraper and the request path would, and reads what it concluded.

// judgeBench is a judge of workers 1 and 2 on a virtual clock, both healthy
// by one answered check, with the changes it emitted counted.
type judgeBench struct {
	t       *testing.T
	j       *judge
	clock   *virtualclock.Clock
	changes atomic.Int32
}

func newJudgeBench(t *testing.T, cfg Config) *judgeBench {
	t.Helper()
	b := &judgeBench{t: t, clock: virtualclock.New(t0)}
	b.j = newJudge(cfg, t0, slog.New(slog.DiscardHandler), func() { b.changes.Add(1) })
	// The URLs are never dialed: the judge does no I/O.
	err := b.j.setWorkers([]Target{{ID: 1, URL: "http://worker-1.invalid:8000"}, {ID: 2, URL: "http://worker-2.invalid:8000"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []WorkerID{1, 2} {
		b.check(id, true)
	}
	return b
}

// now is the clock's reading on the judge's timeline.
func (b *judgeBench) now() int64 { return b.clock.Elapsed().Nanoseconds() }

func (b *judgeBench) worker(id WorkerID) *worker {
	b.t.Helper()
	w := b.j.lookup(id)
	if w == nil {
		b.t.Fatalf("worker %d not watched", id)
	}
	return w
}

// check hands the judge an active check of id answered now, sent now.
func (b *judgeBench) check(id WorkerID, good bool) bool {
	return b.j.checked(b.worker(id), good, b.now(), b.now(), b.j.isolation.round.Add(1))
}

func (b *judgeBench) begin(id WorkerID) *Attempt {
	b.t.Helper()
	a, err := b.j.begin(id, b.now(), nil)
	if err != nil {
		b.t.Fatalf("begin(%d): %v", id, err)
	}
	return a
}

// advanceAndTick moves the clock by d and ticks the judge.
func (b *judgeBench) advanceAndTick(d time.Duration) {
	b.clock.Advance(d)
	b.j.tick(b.now())
}

func TestJudgeWedgesASilentWorkerAtWedgeTimeoutAndAProbeBringsItBack(t *testing.T) {
	cfg := DefaultConfig()
	b := newJudgeBench(t, cfg)
	a := b.begin(1)
	b.advanceAndTick(cfg.WedgeTimeout - time.Second)
	if !b.j.eligible(1) || isClosed(a.Stuck()) {
		t.Fatalf("worker 1 judged before WedgeTimeout: eligible %v, stuck %v", b.j.eligible(1), isClosed(a.Stuck()))
	}
	before := b.changes.Load()
	b.advanceAndTick(time.Second)
	if b.j.eligible(1) || !isClosed(a.Stuck()) {
		t.Fatalf("worker 1 silent for WedgeTimeout: eligible %v, stuck %v; want wedged", b.j.eligible(1), isClosed(a.Stuck()))
	}
	if b.changes.Load() == before {
		t.Fatal("the wedge verdict emitted no change")
	}
	want := []Verdict{{Worker: 1, Kind: VerdictWedged, Since: b.clock.Now()}}
	if got := b.j.verdicts(); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("verdicts %v, want %v", got, want)
	}
	if !b.j.eligible(2) {
		t.Fatal("worker 2, idle, was taken out with worker 1")
	}
	if !b.worker(1).wantGenerate.Load() {
		t.Fatal("no recovery probe asked for the wedged worker")
	}
	b.clock.Advance(time.Second)
	b.j.recovered(b.worker(1), b.now()-int64(time.Second), b.now(), probeResult{})
	if st, _ := b.j.status(1); !b.j.eligible(1) || st.Wedged || st.Circuit != CircuitClosed {
		t.Fatalf("after a recovery probe's answer: %+v; want eligible, not wedged, circuit closed", st)
	}
}

func TestJudgeCountsProgressAsLife(t *testing.T) {
	cfg := DefaultConfig()
	b := newJudgeBench(t, cfg)
	a := b.begin(1)
	b.clock.Advance(cfg.WedgeTimeout / 2)
	a.progress(3, b.now())
	b.advanceAndTick(cfg.WedgeTimeout / 2)
	if !b.j.eligible(1) {
		t.Fatal("a worker that delivered half a WedgeTimeout ago was judged wedged")
	}
	b.advanceAndTick(cfg.WedgeTimeout / 2)
	if b.j.eligible(1) {
		t.Fatal("a worker silent for WedgeTimeout since its last progress is still eligible")
	}
}

func TestJudgeDoesNotCountAFailedCheckThatOverlappedItsOwnStall(t *testing.T) {
	cfg := DefaultConfig()
	b := newJudgeBench(t, cfg)
	b.j.stalls.beat(b.now())
	sent := b.now() + int64(time.Second)
	b.clock.Advance(10 * time.Second) // this replica stopped: no heartbeat for 10s
	b.j.stalls.beat(b.now())
	for range cfg.FailureThreshold {
		if b.j.checked(b.worker(1), false, sent, b.now(), b.j.isolation.round.Add(1)) {
			t.Fatal("a failed check sent before this replica's stall ended was counted")
		}
	}
	if !b.j.eligible(1) {
		t.Fatal("worker 1 was taken out by checks that failed during this replica's stall")
	}
	for i := range cfg.FailureThreshold {
		if !b.check(1, false) {
			t.Fatalf("failed check %d, after the stall, was not counted", i+1)
		}
	}
	if st, _ := b.j.status(1); st.Healthy || b.j.eligible(1) {
		t.Fatalf("after FailureThreshold counted failures: %+v; want unhealthy", st)
	}
}

func TestJudgeTakesAWorkerOutOnAQuorumOfRemoteVerdicts(t *testing.T) {
	b := newJudgeBench(t, DefaultConfig())
	b.j.remote.setLive(3)
	wedged := []Verdict{{Worker: 1, Kind: VerdictWedged, Since: t0}}
	b.j.remote.set("replica-b", wedged)
	if !b.j.eligible(1) {
		t.Fatal("one replica of three took worker 1 out without this replica's evidence")
	}
	b.j.remote.set("replica-c", wedged)
	if b.j.eligible(1) {
		t.Fatal("two replicas of three (a quorum) did not take worker 1 out")
	}
	b.j.remote.set("replica-c", nil)
	if !b.j.eligible(1) {
		t.Fatal("worker 1 stayed out after the quorum was lost")
	}
}
