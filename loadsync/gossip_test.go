package loadsync

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// waitFor polls cond until it holds. The deadline is generous: eight
// memberlist nodes on a loaded two-core host can take more than ten seconds
// to see each other.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, 30*time.Second, cond, "%s", what)
}

type node struct {
	*replica
	g *Gossip
}

type nodeOptions struct {
	clock    clock.WithTicker // default clock.RealClock
	join     []string
	key      []byte
	config   map[string]string
	onMember func(MemberEvent)
	tweak    func(*Config) // changes the State's Config after the defaults above
	channels []Channel
}

func startNode(t *testing.T, name string, o nodeOptions) (*node, error) {
	t.Helper()
	r := newReplica(t, name, func(c *Config) {
		c.BootEpoch = uint64(time.Now().UnixNano())
		if o.config != nil {
			c.ClusterConfig = o.config
		}
		for _, ch := range o.channels {
			c.ChannelTypes = append(c.ChannelTypes, ch.Type())
		}
		if o.tweak != nil {
			o.tweak(c)
		}
	})
	clk := o.clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	g, err := Start(GossipConfig{
		BindAddr:     "127.0.0.1:0",
		Join:         o.join,
		SecretKey:    o.key,
		OnMember:     o.onMember,
		LocalNetwork: true,
		Channels:     o.channels,
	}, r.st, clk)
	if err != nil {
		return nil, err
	}
	n := &node{replica: r, g: g}
	t.Cleanup(func() { _ = g.Stop() })
	return n, nil
}

func mustStart(t *testing.T, name string, o nodeOptions) *node {
	t.Helper()
	n, err := startNode(t, name, o)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return n
}

// startCluster starts n nodes named r0, r1, ... joined through r0.
func startCluster(t *testing.T, size int, o nodeOptions) []*node {
	t.Helper()
	nodes := []*node{mustStart(t, "r0", o)}
	o.join = []string{nodes[0].g.LocalAddr()}
	for i := 1; i < size; i++ {
		nodes = append(nodes, mustStart(t, fmt.Sprintf("r%d", i), o))
	}
	for _, n := range nodes {
		waitFor(t, n.st.cfg.Origin+" sees every member", func() bool { return len(n.g.Members()) == size })
	}
	return nodes
}

func TestGossipReplicasConvergeOnLoadsAndOwnership(t *testing.T) {
	nodes := startCluster(t, 3, nodeOptions{})
	for i, n := range nodes {
		n.local.set(1, int64(i+1))   // 1, 2, 3
		n.local.set(uint32(10+i), 5) // one worker only this replica loads
		n.st.Owned(chain(uint64(i), 6), uint32(i))
	}
	for i, n := range nodes {
		want := map[uint32]int64{1: 6 - int64(i+1), 10: 5, 11: 5, 12: 5}
		want[uint32(10+i)] = 0
		waitFor(t, n.st.cfg.Origin+" has the others' loads", func() bool {
			for w, v := range want {
				if n.remote.get(w) != v || n.st.Remote(w) != v {
					return false
				}
			}
			return true
		})
		for j := range nodes {
			if j == i {
				continue
			}
			deepest := Fact{Hash: chain(uint64(j), 6)[5], Worker: uint32(j), Span: 2} // beyond checkpoint 3
			waitFor(t, n.st.cfg.Origin+" learns r"+string(rune('0'+j))+"'s deepest block", func() bool { return n.learned.has(deepest) })
		}
	}
	if st := nodes[0].g.Stats(); st.PacketsSent == 0 || st.BytesReceived == 0 || st.FactsLearned == 0 {
		t.Fatalf("stats did not count the traffic: %+v", st)
	}
}

// stepUntil steps every clock by one LoadInterval until cond holds.
func stepUntil(t *testing.T, what string, clocks []*testingclock.FakeClock, cond func() bool) {
	t.Helper()
	waitFor(t, what, func() bool {
		for _, c := range clocks {
			c.Step(DefaultLoadInterval)
		}
		return cond()
	})
}

func TestGossipStoppedReplicaLoadDisappears(t *testing.T) {
	clocks := []*testingclock.FakeClock{testingclock.NewFakeClock(t0), testingclock.NewFakeClock(t0), testingclock.NewFakeClock(t0)}
	nodes := []*node{mustStart(t, "r0", nodeOptions{clock: clocks[0]})}
	for i := 1; i < 3; i++ {
		nodes = append(nodes, mustStart(t, fmt.Sprintf("r%d", i), nodeOptions{clock: clocks[i], join: []string{nodes[0].g.LocalAddr()}}))
	}
	nodes[2].local.set(1, 7)
	nodes[1].local.set(1, 1)
	stepUntil(t, "r0 and r1 see r2's load", clocks, func() bool {
		return nodes[0].st.Remote(1) == 8 && nodes[1].st.Remote(1) == 7
	})

	if err := nodes[2].g.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	// The clocks stand still from here, so no TTL can expire: only the
	// leave message can drop r2's load.
	for n, want := range map[*node]int64{nodes[0]: 1, nodes[1]: 0} {
		waitFor(t, n.st.cfg.Origin+" drops the stopped replica's load", func() bool {
			return n.st.Remote(1) == want && n.remote.get(1) == want
		})
	}
}

func TestGossipCrashedReplicaLoadExpires(t *testing.T) {
	clock := testingclock.NewFakeClock(t0)
	first := mustStart(t, "r0", nodeOptions{clock: clock})
	second := mustStart(t, "r1", nodeOptions{join: []string{first.g.LocalAddr()}})
	second.local.set(4, 9)
	stepUntil(t, "r0 sees r1's load", []*testingclock.FakeClock{clock}, func() bool { return first.st.Remote(4) == 9 })

	_ = second.g.Kill()        // no leave message: peers must notice silence
	clock.Step(DefaultLoadTTL) // r1's last report is now older than the TTL
	waitFor(t, "r0 expires r1's load", func() bool { return first.st.Remote(4) == 0 })
}

func TestGossipEncryptionAdmitsOnlyTheSameKey(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	nodes := startCluster(t, 2, nodeOptions{key: key})
	nodes[1].local.set(2, 3)
	waitFor(t, "encrypted load arrives", func() bool { return nodes[0].st.Remote(2) == 3 })

	other := []byte("fedcba9876543210fedcba9876543210")
	_, err := startNode(t, "intruder", nodeOptions{key: other, join: []string{nodes[0].g.LocalAddr()}})
	if !errors.Is(err, ErrGossipKey) {
		t.Fatalf("join with another key = %v, want ErrGossipKey", err)
	}
	_, err = startNode(t, "plain", nodeOptions{join: []string{nodes[0].g.LocalAddr()}})
	if !errors.Is(err, ErrGossipKey) {
		t.Fatalf("join without a key = %v, want ErrGossipKey", err)
	}
	if got := len(nodes[0].g.Members()); got != 2 {
		t.Fatalf("cluster has %d members after refused joins, want 2", got)
	}
}

func TestGossipRefusesConfigMismatchNamingTheField(t *testing.T) {
	first := mustStart(t, "r0", nodeOptions{})
	_, err := startNode(t, "odd", nodeOptions{
		join:   []string{first.g.LocalAddr()},
		config: map[string]string{"block_size": "128"},
	})
	if !errors.Is(err, ErrConfigMismatch) {
		t.Fatalf("join with another block size = %v, want ErrConfigMismatch", err)
	}
	if !strings.Contains(err.Error(), "block_size 128 vs 256") {
		t.Fatalf("error %q does not name the field and both values", err)
	}
	if got := len(first.g.Members()); got != 1 {
		t.Fatalf("the refused replica became a member: %d members", got)
	}
	// The existing member answers before it checks, so its refusal may
	// come after the joiner's.
	waitFor(t, "the existing member counts the refusal", func() bool { return first.g.Stats().JoinRefusals > 0 })
}

func TestGossipJoinerReceivesFullState(t *testing.T) {
	first := mustStart(t, "r0", nodeOptions{})
	for conv := range uint64(500) {
		first.st.Owned(chain(conv, 3), uint32(conv%5))
	}
	// Those digests went out while r0 was alone: only push/pull can carry them.
	waitFor(t, "r0 flushed its digest queue", func() bool { return first.st.Stats().FactsSent == 1500 })

	joiner := mustStart(t, "r1", nodeOptions{join: []string{first.g.LocalAddr()}})
	for _, conv := range []uint64{0, 250, 499} {
		f := Fact{Hash: chain(conv, 3)[2], Worker: uint32(conv % 5), Span: 1}
		waitFor(t, "the joiner learns an old fact", func() bool { return joiner.learned.has(f) })
	}
	if joiner.g.Stats().StateBytesReceived == 0 {
		t.Fatal("no push/pull state was counted")
	}
}

func TestGossipReportsMemberEventsInOrder(t *testing.T) {
	var mu sync.Mutex
	var events []string
	record := func(ev MemberEvent) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev.Kind.String()+" "+ev.Member.Name)
	}
	first := mustStart(t, "r0", nodeOptions{onMember: record})
	second := mustStart(t, "r1", nodeOptions{join: []string{first.g.LocalAddr()}})
	waitFor(t, "r1 joined", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(events, ";"), "joined r1")
	})
	if err := second.g.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "r1 left", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(events, ";"), "joined r1;left r1")
	})
	members := first.g.Members()
	if len(members) != 1 || !members[0].Self || members[0].BootEpoch == 0 {
		t.Fatalf("Members = %+v, want only r0 itself with its epoch", members)
	}
}

func TestDecodeGossipKey(t *testing.T) {
	for _, n := range []int{16, 24, 32} {
		key, err := DecodeGossipKey(base64.StdEncoding.EncodeToString(make([]byte, n)))
		if err != nil || len(key) != n {
			t.Errorf("%d-byte key: %v", n, err)
		}
	}
	for _, bad := range []string{"not base64!", base64.StdEncoding.EncodeToString(make([]byte, 15))} {
		if _, err := DecodeGossipKey(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("DecodeGossipKey(%q) = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func TestGossipTagsReachPeersAndSetTagsUpdatesThem(t *testing.T) {
	nodes := startCluster(t, 2, nodeOptions{})
	tagsOf := func(n *node, name string) map[string]string {
		for _, m := range n.g.Members() {
			if m.Name == name {
				return m.Tags
			}
		}
		return nil
	}
	if err := nodes[1].g.SetTags(map[string]string{"raft": "127.0.0.1:9"}); err != nil {
		t.Fatalf("SetTags: %v", err)
	}
	waitFor(t, "r0 sees r1's new tag", func() bool { return tagsOf(nodes[0], "r1")["raft"] == "127.0.0.1:9" })
	if m := nodes[0].g.Members(); m[1].State != "alive" || m[1].Self || !m[0].Self {
		t.Fatalf("Members = %+v, want r0 (self) and r1 alive", m)
	}
}

// TestSetTagsEverywhereReachesEveryMemberBeforeALeave sets a tag and leaves
// at once, as a stopping replica does: every member hears of the leave with
// the new tag. memberlist's broadcast alone reaches only some of five
// members before the leave supersedes it.
func TestSetTagsEverywhereReachesEveryMemberBeforeALeave(t *testing.T) {
	const size = 5
	var mu sync.Mutex
	leftWith := map[string]string{} // observer -> the tag on its leave event
	o := nodeOptions{}
	nodes := []*node{}
	for i := range size {
		name := fmt.Sprintf("r%d", i)
		o.onMember = func(ev MemberEvent) {
			if ev.Kind == MemberLeft && ev.Member.Name == "r4" {
				mu.Lock()
				leftWith[name] = ev.Member.Tags["leaving"]
				mu.Unlock()
			}
		}
		nodes = append(nodes, mustStart(t, name, o))
		o.join = []string{nodes[0].g.LocalAddr()}
	}
	for _, n := range nodes {
		waitFor(t, n.st.cfg.Origin+" sees every member", func() bool { return len(n.g.Members()) == size })
	}
	leaving := nodes[size-1].g
	if err := leaving.SetTagsEverywhere(map[string]string{"leaving": "1"}); err != nil {
		t.Fatalf("SetTagsEverywhere: %v", err)
	}
	if err := leaving.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitFor(t, "every member hears of r4's leave", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(leftWith) == size-1
	})
	for observer, tag := range leftWith {
		if tag != "1" {
			t.Errorf("%s heard of r4's leave with leaving=%q, want the tag set before it", observer, tag)
		}
	}
}
