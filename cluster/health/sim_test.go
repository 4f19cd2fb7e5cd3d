package health

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// A small simulation over the real Monitor, on virtual time: four workers
// serve streamed completions (100 tokens each, first token after 300ms, then
// 40 tokens/s), clients send 16 requests a second, each to the eligible
// worker with the fewest requests in flight, and the Monitor runs as Run
// would (heartbeat, Tick and its tasks every second, recovery probes to real
// loopback workers). At onset, worker 4 becomes 20x slower, its one-token
// answers included; later it heals. The clients pick among eligible workers
// either by fewest in flight (which starves a slow worker on its own) or at
// random (which does not).

const (
	simStep       = 100 * time.Millisecond
	simTokens     = 100
	simTTFT       = 300 * time.Millisecond
	simTokenEvery = 25 * time.Millisecond
	simRate       = 16.0 // requests per second
	simProbeBase  = 2 * time.Millisecond
)

type simRequest struct {
	a     *Attempt
	start time.Duration
	slow  float64 // the worker's slowdown when the request began
	sent  int     // tokens reported
}

type simFleet struct {
	m       *Monitor
	clock   *testingclock.FakeClock
	now     time.Duration
	slow    map[WorkerID]float64
	probes  map[WorkerID]*fakeWorker
	active  []*simRequest
	inwork  map[WorkerID]int
	routed  map[WorkerID]int
	rng     *rand.Rand
	pending float64
	random  bool // clients pick an eligible worker at random, not the least busy
}

func newSimFleet(t *testing.T, random bool) *simFleet {
	cfg := DefaultConfig()
	cfg.Interval = time.Hour
	cfg.Timeout = 2 * time.Second
	ts, fws := fleet(t, 4)
	m, clock := newTestMonitor(t, cfg, ts...)
	f := &simFleet{m: m, clock: clock, slow: map[WorkerID]float64{}, probes: map[WorkerID]*fakeWorker{},
		inwork: map[WorkerID]int{}, routed: map[WorkerID]int{}, rng: rand.New(rand.NewPCG(7, 11)), random: random}
	for i, fw := range fws {
		id := WorkerID(i + 1)
		f.probes[id] = fw
		f.setSlowdown(id, 1)
	}
	m.judge.stalls.beat(m.now())
	return f
}

func (f *simFleet) setSlowdown(id WorkerID, s float64) {
	f.slow[id] = s
	f.probes[id].genDelay.Store(int64(time.Duration(s * float64(simProbeBase))))
}

// run advances the simulation to until, calling each after every step.
func (f *simFleet) run(t *testing.T, until time.Duration, each func()) {
	for f.now < until {
		f.now += simStep
		f.clock.Step(simStep)
		f.arrive(t)
		f.deliver()
		if f.now%time.Second == 0 {
			f.m.judge.stalls.beat(f.m.now())
			f.m.Tick()
			tasksRound(f.m)
		}
		each()
	}
}

func (f *simFleet) arrive(t *testing.T) {
	f.pending += f.rng.ExpFloat64() * simRate * simStep.Seconds()
	for ; f.pending >= 1; f.pending-- {
		id, ok := f.pick()
		if !ok {
			continue
		}
		a, err := f.m.Begin(id)
		if errors.Is(err, ErrCircuitOpen) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		a.Progress(0) // response headers
		f.active = append(f.active, &simRequest{a: a, start: f.now, slow: f.slow[id]})
		f.inwork[id]++
		f.routed[id]++
	}
}

// pick is the eligible worker with the fewest requests in flight, or a
// random eligible one.
func (f *simFleet) pick() (WorkerID, bool) {
	best, found := WorkerID(0), false
	for _, id := range f.rng.Perm(4) {
		w := WorkerID(id + 1)
		if f.m.Eligible(w) && (!found || !f.random && f.inwork[w] < f.inwork[best]) {
			best, found = w, true
		}
	}
	return best, found
}

func (f *simFleet) deliver() {
	keep := f.active[:0]
	for _, r := range f.active {
		s := f.slow[r.a.Worker()] // a slowdown applies to requests in flight too
		elapsed := f.now - r.start - time.Duration(float64(simTTFT)*r.slow)
		due := 0
		if elapsed >= 0 {
			due = min(simTokens, 1+int(elapsed/time.Duration(float64(simTokenEvery)*s)))
		}
		if due > r.sent {
			r.a.Progress(due - r.sent)
			r.sent = due
		}
		if r.sent == simTokens {
			r.a.End(OutcomeSuccess)
			f.inwork[r.a.Worker()]--
			continue
		}
		keep = append(keep, r)
	}
	f.active = keep
}

func TestSimulatedDegradeIsCaughtFastAndStarvesTheWorker(t *testing.T) {
	for _, random := range []bool{false, true} {
		name := map[bool]string{false: "least_in_flight", true: "random"}[random]
		t.Run(name, func(t *testing.T) { simulateDegrade(t, newSimFleet(t, random)) })
	}
}

func simulateDegrade(t *testing.T, f *simFleet) {
	const onset, heal, end = 60 * time.Second, 180 * time.Second, 240 * time.Second
	f.run(t, onset, func() {})
	if !f.m.Eligible(4) {
		t.Fatal("worker 4 out before it was degraded")
	}
	f.setSlowdown(4, 20)
	before := map[WorkerID]int{}
	for id, n := range f.routed {
		before[id] = n
	}
	var caught time.Duration
	f.run(t, heal, func() {
		if caught == 0 && !f.m.Eligible(4) {
			caught = f.now - onset
		}
	})
	total, mine := 0, f.routed[4]-before[4]
	for id, n := range f.routed {
		total += n - before[id]
	}
	share := float64(mine) / (float64(total) / 4)
	t.Logf("degraded 20x: caught %v after onset; got %d of %d requests in the %v after onset, %.3f of its fair share",
		caught, mine, total, heal-onset, share)
	if caught == 0 || caught > 15*time.Second {
		t.Fatalf("caught %v after onset, want within 15s", caught)
	}
	if share >= 0.1 {
		t.Fatalf("the degraded worker got %.3f of its fair share, want below 1/10", share)
	}
	f.setSlowdown(4, 1)
	var back time.Duration
	f.run(t, end, func() {
		if back == 0 && f.m.Eligible(4) && status(t, f.m, 4).Circuit == CircuitClosed {
			back = f.now - heal
		}
	})
	t.Logf("healed: closed again %v later", back)
	if back == 0 {
		t.Fatalf("a healed worker was not back %v later", end-heal)
	}
}
