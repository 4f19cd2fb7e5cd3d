package membership

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/loadsync"
)

// fakeRaft is a leader whose configuration changes apply at once. Run
// calls LeaderChanges before every round: there the loop pauses, tells the
// test on paused and waits for resume, so the test steps the clock while
// no round runs. The channel it returns is closed: every round is followed
// by another, whenever the test resumes it.
type fakeRaft struct {
	clock          *clocktesting.FakeClock
	paused, resume chan struct{}
	done           chan struct{}

	mu       sync.Mutex
	servers  []Server
	promoted map[string]time.Time // when AddVoter was called for each id
}

func (f *fakeRaft) Servers(context.Context) ([]Server, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.servers), nil
}

func (f *fakeRaft) set(id, addr, suffrage string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers = slices.DeleteFunc(f.servers, func(s Server) bool { return s.ID == id })
	if suffrage != "" {
		f.servers = append(f.servers, Server{ID: id, Addr: addr, Suffrage: suffrage})
	}
}

func (f *fakeRaft) AddVoter(_ context.Context, id, addr string) error {
	f.set(id, addr, Voter)
	f.mu.Lock()
	f.promoted[id] = f.clock.Now()
	f.mu.Unlock()
	return nil
}

func (f *fakeRaft) AddNonvoter(_ context.Context, id, addr string) error {
	f.set(id, addr, Nonvoter)
	return nil
}

func (f *fakeRaft) RemoveServer(_ context.Context, id string) error {
	f.set(id, "", "")
	return nil
}

func (f *fakeRaft) Bootstrap(context.Context, []Server) error { return nil }
func (f *fakeRaft) IsLeader() bool                            { return true }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (f *fakeRaft) LeaderChanges() <-chan struct{} {
	select {
	case f.paused <- struct{}{}:
	case <-f.done:
		return nil
	}
	select {
	case <-f.resume:
	case <-f.done:
		return nil
	}
	return closedChan
}

func (f *fakeRaft) promotedAt(id string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.promoted[id]
	return at, ok
}

// fakeGossip is a gossip membership the test sets.
type fakeGossip struct {
	mu      sync.Mutex
	members []loadsync.Member
}

func (g *fakeGossip) setLive(names ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.members = nil
	for _, n := range names {
		g.members = append(g.members, loadsync.Member{Name: n, Tags: map[string]string{TagRaft: addrOf(n)}})
	}
}

func addrOf(name string) string { return "10.0.0." + name + ":7947" }

func (g *fakeGossip) Members() []loadsync.Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.members)
}

func (g *fakeGossip) Reporting(time.Time) map[string]bool { return nil }
func (g *fakeGossip) Join([]string) error                 { return nil }
func (g *fakeGossip) AnnounceJoined() error               { return nil }

// TestAReplicaThatJoinsLateTakesAReapedSeatOnlyOnceStable runs the loop on
// a fake clock: voter c goes away, replica d joins five seconds before c is
// reaped. d is added as a non-voter at once, and promoted only once it has
// been live for the stabilisation time, not the moment c's seat empties.
func TestAReplicaThatJoinsLateTakesAReapedSeatOnlyOnceStable(t *testing.T) {
	start := time.Unix(1000, 0)
	clk := clocktesting.NewFakeClock(start)
	raft := &fakeRaft{clock: clk, paused: make(chan struct{}), resume: make(chan struct{}), done: make(chan struct{}), promoted: map[string]time.Time{}}
	for _, id := range []string{"a", "b", "c"} {
		raft.set(id, addrOf(id), Voter)
	}
	gossip := &fakeGossip{}
	gossip.setLive("a", "b") // c is missing from the first round
	cfg := Config{Self: "a", Expect: 3, ReconcileInterval: time.Second, ReapTimeout: 30 * time.Second,
		Stabilization: 10 * time.Second, Clock: clk}
	m := New(cfg, raft, gossip, true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		close(raft.done)
		wg.Wait()
	})
	pause := func() {
		t.Helper()
		select {
		case <-raft.paused:
		case <-time.After(10 * time.Second):
			t.Fatal("the membership loop did not come round")
		}
	}
	pause() // before the first round
	for clk.Since(start) < time.Minute {
		raft.resume <- struct{}{}
		pause() // the round at clk.Now() is done
		clk.Step(time.Second)
		if clk.Since(start) == 25*time.Second {
			gossip.setLive("a", "b", "d")
		}
	}
	at, ok := raft.promotedAt("d")
	if !ok {
		t.Fatalf("d was never promoted; servers %+v", raft.servers)
	}
	// d is added at 25 s (the first round that sees it) and is stable from
	// the round after, 26 s: it may be promoted at 36 s, not at 30 s, when
	// c is reaped.
	if got := at.Sub(start); got < 36*time.Second {
		t.Fatalf("d promoted %v after the start, before it had been stable for %v", got, cfg.Stabilization)
	}
	if got := at.Sub(start); got > 40*time.Second {
		t.Fatalf("d promoted only %v after the start", got)
	}
}

// joinRecorder is a gossip membership the test sets that records every
// Join.
type joinRecorder struct {
	fakeGossip
	joinMu sync.Mutex
	joins  [][]string
}

func (g *joinRecorder) Join(addrs []string) error {
	g.joinMu.Lock()
	defer g.joinMu.Unlock()
	g.joins = append(g.joins, slices.Clone(addrs))
	return nil
}

func (g *joinRecorder) joined() [][]string {
	g.joinMu.Lock()
	defer g.joinMu.Unlock()
	return slices.Clone(g.joins)
}

func gossipMember(name string, joined bool) loadsync.Member {
	tags := map[string]string{TagRaft: addrOf(name)}
	if joined {
		tags[TagJoined] = "1"
	}
	return loadsync.Member{Name: name, Addr: "gossip-" + name, Tags: tags}
}

// A replica that --join brought into the gossip of a running cluster, but
// that no leader has added yet, push/pulls with every member holding Raft
// state, so the leader hears of it first-hand instead of by a rumour that
// may miss it; once it is in the Raft configuration it stops.
func TestAReplicaOutsideTheRaftConfigurationAnnouncesItselfToTheJoinedMembers(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	raft := &fakeRaft{clock: clk, promoted: map[string]time.Time{}}
	gossip := &joinRecorder{}
	self := gossipMember("d", false)
	self.Self = true
	gossip.members = []loadsync.Member{gossipMember("a", true), gossipMember("b", true), gossipMember("c", false), self}
	m := New(Config{Self: "d", Expect: 3, Clock: clk}, raft, gossip, false)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.RunRejoin(ctx, "gossip-d")
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	round := func() {
		t.Helper()
		testwait.Eventually(t, 10*time.Second, clk.HasWaiters, "the rejoin loop waits")
		clk.Step(rejoinMax)
		testwait.Eventually(t, 10*time.Second, clk.HasWaiters, "the rejoin loop's round ends")
	}

	round()
	want := [][]string{{"gossip-a", "gossip-b"}}
	if got := gossip.joined(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("joins outside the raft configuration: %v, want %v", got, want)
	}
	raft.set("d", addrOf("d"), Nonvoter) // the leader added d
	round()
	if got := gossip.joined(); len(got) != 1 {
		t.Fatalf("joins once in the raft configuration: %v, want none after the first", got)
	}
}

// Before any member holds Raft state, a new cluster's replicas wait for the
// bootstrap: none has anyone to announce itself to.
func TestAReplicaOfANewClusterAnnouncesItselfToNobody(t *testing.T) {
	gossip := []loadsync.Member{gossipMember("a", false), gossipMember("b", false)}
	if got := joinedAddrs(gossip, "gossip-c"); got != nil {
		t.Fatalf("joined members of a new cluster: %v", got)
	}
}
