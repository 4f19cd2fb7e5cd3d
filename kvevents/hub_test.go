package kvevents

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/tcpforward"
)

// loopbackNet is a worker-host policy for the tests: 127.0.0.0/8 only.
func loopbackNet(hostport string) (string, error) {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil || !ap.Addr().IsLoopback() {
		return "", errors.New("not loopback")
	}
	return hostport, nil
}

// tier is hubs that relay to each other as replicas do: what one's Outbox
// holds reaches every other's Receive (pump), and a snapshot fetch asks the
// named hub (Fetch).
type tier struct {
	t    *testing.T
	mu   sync.Mutex
	hubs map[string]*Hub
}

func newTier(t *testing.T) *tier { return &tier{t: t, hubs: map[string]*Hub{}} }

// hub starts a hub named name in the tier, bound to a loopback port, that
// knows ws.
func (tr *tier) hub(name string, ws []HubWorker) *Hub {
	tr.t.Helper()
	h, err := NewHub(HubConfig{ViewConfig: ViewConfig{BlockSize: testBlock, MaxBlocks: 1000, StaleAfter: 200 * time.Millisecond},
		Origin: name, Allow: loopbackNet, Retry: 20 * time.Millisecond, Heartbeat: 20 * time.Millisecond,
		Fetch: tr.fetch, Peers: func() []string { return tr.others(name) }})
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.t.Cleanup(h.Close)
	if err := h.Sync(ws); err != nil {
		tr.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tr.t.Fatal(err)
	}
	if err := h.Listen(ln); err != nil {
		tr.t.Fatal(err)
	}
	tr.mu.Lock()
	tr.hubs[name] = h
	tr.mu.Unlock()
	return h
}

func (tr *tier) others(name string) []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for n := range tr.hubs {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}

// fetch answers a snapshot ask through the wire encoding, as the cluster
// port does.
func (tr *tier) fetch(_ context.Context, origin string, ids []uint32) (map[uint32]Snapshot, error) {
	tr.mu.Lock()
	h := tr.hubs[origin]
	tr.mu.Unlock()
	if h == nil {
		return nil, errors.New("no such peer")
	}
	return DecodeSnapshots(AppendSnapshots(nil, h.Snapshots(ids)), len(ids), 1000)
}

// pump carries every hub's outbox to the others once.
func (tr *tier) pump() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	now := time.Now()
	for name, h := range tr.hubs {
		for _, p := range h.Outbox(now) {
			for other, o := range tr.hubs {
				if other != name {
					_ = o.Receive(p, now)
				}
			}
		}
	}
}

// dialingEngine is an engine that dials addr with topic, as vLLM given a
// router's address does, with a replay socket of its own bound on
// loopback.
func dialingEngine(t *testing.T, addr net.Addr, topic string) *Publisher {
	t.Helper()
	p, err := NewPublisher(PublisherConfig{Endpoint: "tcp://" + addr.String(), Connect: true, Topic: topic, Encoding: Keyed,
		ReplayEndpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// workers are worker 1 on 127.0.0.1, whose engine replays from replay,
// and worker 2 on 127.0.0.2.
func workers(replay string) []HubWorker {
	return []HubWorker{{ID: 1, Host: "127.0.0.1:8101", ReplayEndpoint: replay}, {ID: 2, Host: "127.0.0.2:8102"}}
}

var twoWorkers = workers("")

func lbAddr(f *tcpforward.Forwarder) net.Addr {
	a, _ := net.ResolveTCPAddr("tcp", f.Addr())
	return a
}

func matchedOn(h *Hub, id uint32, tokens []uint32) (int, Trust) {
	return h.Matched(id, h.Keys(nil, "", tokens))
}

func TestAnEngineThatDialsTheBoundSocketIsHeardForTheWorkerItsTopicNames(t *testing.T) {
	tr := newTier(t)
	h := tr.hub("r1", twoWorkers)
	p := dialingEngine(t, h.BoundAddr(), "kv@127.0.0.1:8101@m")
	if err := h.Sync(workers(p.ReplayEndpoint())); err != nil {
		t.Fatal(err)
	}
	held := prompt(1, 3)
	n := EngineHash(0)
	eventually(t, "the engine's blocks heard through the bound socket", func() {
		n += 100
		publish(t, p, stored(names(n), nil, held))
	}, func() bool { m, tr := matchedOn(h, 1, held); return m == 3 && tr == Trusted })
	if st, _ := h.Status(1); st.Source != "bind" {
		t.Errorf("source %q, want bind", st.Source)
	}
	if m, _ := matchedOn(h, 2, held); m != 0 {
		t.Error("another worker's set took the batches")
	}
}

func TestATopicNamingAnotherHostsWorkerOrNoneIsCountedAndDropped(t *testing.T) {
	tr := newTier(t)
	h := tr.hub("r1", twoWorkers)
	elsewhere := dialingEngine(t, h.BoundAddr(), "kv@127.0.0.2:8102@m") // connects from 127.0.0.1
	unknown := dialingEngine(t, h.BoundAddr(), "kv@127.0.0.1:9999@m")
	eventually(t, "both counted", func() {
		publish(t, elsewhere, stored(names(1), nil, prompt(1, 1)))
		publish(t, unknown, stored(names(1), nil, prompt(1, 1)))
	}, func() bool { s := h.BindStats(); return s.Elsewhere > 0 && s.Unknown > 0 })
	if m, _ := matchedOn(h, 2, prompt(1, 1)); m != 0 {
		t.Error("an engine wrote another host's worker's set")
	}
	if st, _ := h.Status(2); st.Source != "" || st.Stats.Batches != 0 {
		t.Errorf("worker 2: %+v", st)
	}
}

func TestAConnectionFromNoWorkersAddressIsRefusedUnread(t *testing.T) {
	tr := newTier(t)
	h := tr.hub("r1", []HubWorker{{ID: 2, Host: "127.0.0.2:8102"}})
	nc, err := net.Dial("tcp", h.BoundAddr().String()) // from 127.0.0.1
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := nc.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d bytes (%v): a stranger got a greeting", n, err)
	}
	if h.BindStats().NotAWorker != 1 {
		t.Errorf("stats %+v", h.BindStats())
	}
}

func TestASecondConnectionForAWorkerAlreadyFedIsRefused(t *testing.T) {
	tr := newTier(t)
	h := tr.hub("r1", twoWorkers)
	first := dialingEngine(t, h.BoundAddr(), "kv@127.0.0.1:8101@m")
	eventually(t, "the first connection feeds worker 1", func() { publish(t, first, stored(names(1), nil, prompt(1, 1))) },
		func() bool { st, _ := h.Status(1); return st.Source == "bind" })
	second := dialingEngine(t, h.BoundAddr(), "kv@127.0.0.1:8101@m")
	eventually(t, "the second refused", func() { publish(t, second, stored(names(50), nil, prompt(50, 1))) },
		func() bool { return h.BindStats().Claimed > 0 })
	if m, _ := matchedOn(h, 1, prompt(50, 1)); m != 0 {
		t.Error("the second connection's batches were applied")
	}
}

// TestEveryReplicaHoldsWhatTheEnginePublishedToOne: an engine publishes to
// one replica; its peers hold the same set from the relay, trust it while
// the hearer says it hears the engine, and a replica that joins later gets
// it from a snapshot without a batch of its own.
func TestEveryReplicaHoldsWhatTheEnginePublishedToOne(t *testing.T) {
	tr := newTier(t)
	r1, r2 := tr.hub("r1", twoWorkers), tr.hub("r2", twoWorkers)
	p := dialingEngine(t, r1.BoundAddr(), "kv@127.0.0.1:8101@m")
	for _, h := range []*Hub{r1, r2} {
		if err := h.Sync(workers(p.ReplayEndpoint())); err != nil {
			t.Fatal(err)
		}
	}
	held := prompt(1, 3)
	n := EngineHash(0)
	eventually(t, "r2 holds the blocks published to r1", func() {
		n += 100
		publish(t, p, stored(names(n), nil, held))
		tr.pump()
	}, func() bool { m, tr := matchedOn(r2, 1, held); return m == 3 && tr == Trusted })
	if st, _ := r2.Status(1); st.Source != "peer" || st.Stats.Followed == 0 {
		t.Errorf("r2: %+v", st)
	}
	r3 := tr.hub("r3", workers(p.ReplayEndpoint()))
	eventually(t, "a replica that joins later holds them from a snapshot", tr.pump,
		func() bool { m, tr := matchedOn(r3, 1, held); return m == 3 && tr == Trusted })
	if st, _ := r3.Status(1); st.Stats.Restored == 0 {
		t.Errorf("r3: %+v", st)
	}
	a, _ := r1.Snapshots([]uint32{1})[1], 0
	b := r3.Snapshots([]uint32{1})[1]
	if a.Next != b.Next || len(a.Names) != len(b.Names) || len(a.Keys) != len(b.Keys) {
		t.Errorf("r1 at %d with %d names, r3 at %d with %d", a.Next, len(a.Names), b.Next, len(b.Names))
	}
}

// TestWhenTheHearerDiesTheEngineGoesOnWithAPeerWithoutAReset: the engine's
// connection moves to another replica (its load balancer's choice); that
// replica held the set from the relay and goes on from it.
func TestWhenTheHearerDiesTheEngineGoesOnWithAPeerWithoutAReset(t *testing.T) {
	tr := newTier(t)
	r1, r2 := tr.hub("r1", twoWorkers), tr.hub("r2", twoWorkers)
	lb := tcpforward.New(t, r1.BoundAddr().String())
	p := dialingEngine(t, lbAddr(lb), "kv@127.0.0.1:8101@m")
	for _, h := range []*Hub{r1, r2} {
		if err := h.Sync(workers(p.ReplayEndpoint())); err != nil {
			t.Fatal(err)
		}
	}
	before := prompt(1, 2)
	n := EngineHash(0)
	eventually(t, "r2 follows r1", func() {
		n += 100
		publish(t, p, stored(names(n), nil, before))
		tr.pump()
	}, func() bool { m, _ := matchedOn(r2, 1, before); return m == 2 })
	lb.To(r2.BoundAddr().String()) // r1 dies: its connections go, new ones reach r2
	tr.mu.Lock()
	delete(tr.hubs, "r1")
	tr.mu.Unlock()
	r1.Close()
	after := prompt(500, 1)
	eventually(t, "r2 hears the engine itself", func() {
		n += 100
		publish(t, p, stored(names(n), nil, after))
	}, func() bool {
		st, _ := r2.Status(1)
		m, _ := matchedOn(r2, 1, after)
		return st.Source == "bind" && m == 1
	})
	st, _ := r2.Status(1)
	if m, tr := matchedOn(r2, 1, before); m != 2 || tr != Trusted {
		t.Errorf("after the switch, the blocks from before: %d, %v (stats %+v)", m, tr, st.Stats)
	}
	if st.Stats.Lost+st.Stats.Rewinds+st.Stats.PeerResets != 0 {
		t.Errorf("the switch reset the set: %+v", st.Stats)
	}
}

// TestAReplicaThatStartsWhileAnEngineRunsTakesItsSetFromAPeer: dialing an
// engine with no replay socket, a replica that joins late would have lost
// what the engine stored before; it takes that from a peer instead.
func TestAReplicaThatStartsWhileAnEngineRunsTakesItsSetFromAPeer(t *testing.T) {
	p, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Encoding: Keyed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	dialed := []HubWorker{{ID: 1, Host: "127.0.0.1:8101", Endpoint: p.Endpoint()}}
	tr := newTier(t)
	r1 := tr.hub("r1", dialed)
	early := prompt(1, 3)
	n := EngineHash(0)
	eventually(t, "r1 hears the engine from its start", func() {
		n += 100
		publish(t, p, stored(names(n), nil, early))
	}, func() bool { m, tr := matchedOn(r1, 1, early); return m == 3 && tr == Trusted })
	r2 := tr.hub("r2", dialed)
	late := prompt(700, 1)
	eventually(t, "r2 hears the engine", func() {
		n += 100
		publish(t, p, stored(names(n), nil, late))
	}, func() bool { m, tr := matchedOn(r2, 1, late); return m == 1 && tr == Trusted })
	st, _ := r2.Status(1)
	if m, _ := matchedOn(r2, 1, early); m != 3 || st.Stats.Restored == 0 || st.Stats.Lost != 0 {
		t.Errorf("r2 matches %d of the blocks stored before it started; stats %+v", m, st.Stats)
	}
}

// TestAStreamJoinedLateWithNothingToFillItIsRecoveringForTheStaleWindow: no
// replay socket and no peer: the set lacks what the engine stored before,
// and routes on the text index until the window has passed.
func TestAStreamJoinedLateWithNothingToFillItIsRecoveringForTheStaleWindow(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	p, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Encoding: Keyed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	withhold(t, p, stored(names(1), nil, prompt(1, 2)))
	h, err := NewHub(HubConfig{ViewConfig: ViewConfig{BlockSize: testBlock, StaleAfter: 5 * time.Second, Now: clock.Now},
		Allow: loopbackNet, Retry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Sync([]HubWorker{{ID: 1, Endpoint: p.Endpoint()}}); err != nil {
		t.Fatal(err)
	}
	late := prompt(700, 1)
	eventually(t, "a live batch", func() { publish(t, p, stored(names(500), nil, late)) },
		func() bool { st, _ := h.Status(1); return st.Blocks == 1 })
	if _, tr := matchedOn(h, 1, late); tr != Recovering {
		t.Fatalf("joined late with nothing to fill the gap: %v", tr)
	}
	clock.advance(5 * time.Second)
	if _, tr := matchedOn(h, 1, late); tr != Trusted {
		t.Fatalf("a window after: %v", tr)
	}
}

// TestAPublishersNextSequenceIsWhatAnUpToDateSubscriberExpects: the
// publisher counts the batches it numbered, from 0 again after a restart.
func TestAPublishersNextSequenceIsWhatAnUpToDateSubscriberExpects(t *testing.T) {
	p, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Encoding: Keyed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	for range 2 {
		publish(t, p, stored(names(1), nil, prompt(1, 1)))
	}
	if n := p.Next(); n != 2 {
		t.Errorf("after 2 batches Next = %d, want 2", n)
	}
	p.Restart()
	if n := p.Next(); n != 0 {
		t.Errorf("after a restart Next = %d, want 0", n)
	}
}
