package kvevents

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func TestAStreamIsTrustedOnlyOnceHeardAndWhileConnectedInOrderAndHeardWhenItHadWork(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const stale = 10 * time.Second
	var w watch
	if got := w.trust(t0, stale); got != Disconnected {
		t.Fatalf("never connected: %v", got)
	}
	w.connected = true
	if got := w.trust(t0, stale); got != Unheard {
		t.Fatalf("connected and nothing heard: %v, want unheard (silence is not an empty cache)", got)
	}
	w.note(Stats{}, t0, true)
	if got := w.trust(t0, stale); got != Trusted {
		t.Fatalf("connected and heard: %v", got)
	}
	w.replaying = true
	if got := w.trust(t0, stale); got != Replaying {
		t.Fatalf("a gap being filled: %v", got)
	}
	w.replaying = false

	w.expect(t0)
	if got := w.trust(t0.Add(stale), stale); got != Trusted {
		t.Fatalf("work for exactly the stale window: %v", got)
	}
	if got := w.trust(t0.Add(stale+time.Millisecond), stale); got != Stale {
		t.Fatalf("work and no event past the window: %v", got)
	}
	w.note(Stats{Batches: 1}, t0.Add(stale+time.Second), true)
	if got := w.trust(t0.Add(stale+time.Second), stale); got != Trusted {
		t.Fatalf("an event after the silence: %v", got)
	}

	t1 := t0.Add(time.Minute)
	w.note(Stats{Rewinds: 1}, t1, true)
	if got := w.trust(t1.Add(stale-time.Millisecond), stale); got != Recovering {
		t.Fatalf("just after a rewind: %v", got)
	}
	if got := w.trust(t1.Add(stale), stale); got != Trusted {
		t.Fatalf("a stale window after the rewind: %v", got)
	}
	w.connected = false
	if got := w.trust(t1.Add(stale), stale); got != Disconnected {
		t.Fatalf("the connection dropped: %v", got)
	}
	w.relayedTo = t1.Add(stale + time.Second)
	if got := w.trust(t1.Add(stale), stale); got != Trusted {
		t.Fatalf("a peer says it hears the engine: %v", got)
	}
}

// An engine that reports running requests and publishes nothing goes
// stale, whoever sent it the requests; an idle one does not.
func TestAnEngineBusyAndSilentGoesStale(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const stale = 10 * time.Second
	w := watch{connected: true}
	w.note(Stats{}, t0, true)
	if got := w.trust(t0.Add(time.Hour), stale); got != Trusted {
		t.Fatalf("idle and silent for an hour: %v", got)
	}
	t1 := t0.Add(time.Hour)
	w.busy(true, t1)
	if got := w.trust(t1.Add(stale), stale); got != Trusted {
		t.Fatalf("busy for exactly the window: %v", got)
	}
	if got := w.trust(t1.Add(stale+time.Millisecond), stale); got != Stale {
		t.Fatalf("busy and silent past the window: %v", got)
	}
	w.note(Stats{Batches: 1}, t1.Add(stale+time.Second), true)
	if got := w.trust(t1.Add(stale+time.Second), stale); got != Trusted {
		t.Fatalf("a batch from the busy engine: %v", got)
	}
	w.busy(false, t1.Add(2*stale))
	if got := w.trust(t1.Add(time.Hour), stale); got != Trusted {
		t.Fatalf("idle again: %v", got)
	}
}

func TestAHubHearsTheRegistrysWorkersAndTrustsOnlyAFreshStream(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	p := startPublisher(t, Keyed)
	h, err := NewHub(HubConfig{ViewConfig: ViewConfig{BlockSize: testBlock, StaleAfter: 5 * time.Second, Now: clock.Now},
		Allow: loopbackOnly, Retry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Sync([]HubWorker{{ID: 1, Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint()},
		{ID: 2, Endpoint: "tcp://10.1.2.3:5557"}}); err == nil {
		t.Fatal("an endpoint the policy refuses was accepted")
	}
	held := prompt(1, 3)
	keys := h.Keys(nil, "", held)
	n := EngineHash(0)
	eventually(t, "stored blocks heard", func() {
		n += 100
		publish(t, p, stored(names(n), nil, held))
	}, func() bool { m, tr := h.Matched(1, keys); return m == 3 && tr == Trusted })
	if _, tr := h.Matched(2, keys); tr != Disconnected {
		t.Errorf("a refused worker: %v", tr)
	}

	h.Expect(1)
	clock.advance(6 * time.Second)
	if m, tr := h.Matched(1, keys); tr != Stale || m != 0 {
		t.Errorf("work and no event for longer than the window: %d blocks, %v", m, tr)
	}
	eventually(t, "an event after the silence", func() {
		n += 100
		publish(t, p, stored(names(n), nil, prompt(50, 1)))
	}, func() bool { _, tr := h.Matched(1, keys); return tr == Trusted })

	if err := h.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Status(1); ok {
		t.Error("a worker that left is still heard")
	}
}

func TestAHubRemembersWhenAnEngineEvictedAPromptsBlocks(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	p := startPublisher(t, Keyed)
	h, err := NewHub(HubConfig{ViewConfig: ViewConfig{BlockSize: testBlock, Now: clock.Now}, Allow: loopbackOnly,
		Retry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Sync([]HubWorker{{ID: 1, Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint()}}); err != nil {
		t.Fatal(err)
	}
	held := prompt(1, 2)
	keys := h.Keys(nil, "", held)
	n := EngineHash(0)
	eventually(t, "stored blocks heard", func() {
		n += 100
		publish(t, p, stored(names(n), nil, held))
	}, func() bool { m, _ := h.Matched(1, keys); st, _ := h.Status(1); return m == 2 && st.Stats.Live > 0 }) // subscribed
	before := clock.Now()
	clock.advance(time.Second)
	publish(t, p, Event{Kind: Removed, Tier: true, Hashes: []EngineHash{n}})
	eventually(t, "the removal heard", nil, func() bool { m, _ := h.Matched(1, keys); return m == 0 })
	if !h.EvictedSince(1, keys, before) {
		t.Error("a removal after a decision is not remembered")
	}
	if h.EvictedSince(1, keys, clock.Now().Add(time.Second)) {
		t.Error("a removal before a decision is taken as after it")
	}
	if !h.EvictedSince(2, keys, before) {
		t.Error("a worker the hub does not hear is taken as holding its reservations")
	}
}
