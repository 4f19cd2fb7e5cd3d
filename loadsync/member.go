package loadsync

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/memberlist"
)

// Member is one replica of the cluster as memberlist last told us about it.
type Member struct {
	// Name is the replica's node name (its Origin).
	Name string
	// Addr is its gossip address, ip:port.
	Addr string
	// State is "alive" for a live member and "gone" in a MemberLeft
	// event: memberlist does not tell its event delegate whether a member
	// left or died (Node.State, which memberOf used to read, is never
	// updated; memberlist keeps the state in its own nodeState).
	State string
	// BootEpoch is the epoch it announced; zero if its metadata did not
	// decode.
	BootEpoch uint64
	// Tags are the tags it announced (Config.Tags, Gossip.SetTags); nil
	// if its metadata did not decode.
	Tags map[string]string
	// Self marks this replica.
	Self bool
}

// MemberEventKind says what happened to a member.
type MemberEventKind int

// Member event kinds.
const (
	MemberJoined MemberEventKind = iota
	MemberLeft                   // left gracefully or declared dead
	MemberUpdated
)

func (k MemberEventKind) String() string {
	switch k {
	case MemberJoined:
		return "joined"
	case MemberLeft:
		return "left"
	case MemberUpdated:
		return "updated"
	}
	return fmt.Sprintf("MemberEventKind(%d)", int(k))
}

// MemberEvent is one membership change.
type MemberEvent struct {
	Kind   MemberEventKind
	Member Member
}

func memberOf(kind MemberEventKind, n *memberlist.Node, self string) Member {
	state := "alive"
	if kind == MemberLeft {
		state = "gone"
	}
	m := Member{Name: n.Name, Addr: n.Address(), State: state, Self: n.Name == self}
	if meta, err := decodeMeta(n.Meta); err == nil {
		m.BootEpoch, m.Tags = meta.epoch, meta.tags
	}
	return m
}

// memberTable is the live members, kept from memberlist's events. It exists
// because memberlist's Members hands out nodes that its goroutines go on
// changing: the events are the one place it lets us read a node under its
// lock.
type memberTable struct {
	mu sync.Mutex
	by map[string]Member
}

func (t *memberTable) init() { t.by = make(map[string]Member) }

func (t *memberTable) apply(kind MemberEventKind, m Member) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if kind == MemberLeft {
		delete(t.by, m.Name)
		return
	}
	t.by[m.Name] = m
}

func (t *memberTable) list() []Member {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.SortedFunc(maps.Values(t.by), func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
}

// eventQueue hands membership events from memberlist's goroutines, which
// must not block, to the goroutine that runs OnMember. It is unbounded:
// events are as rare as membership changes.
type eventQueue struct {
	mu      sync.Mutex
	pending []MemberEvent
	signal  chan struct{} // capacity 1: "pending is not empty"
}

func newEventQueue() *eventQueue { return &eventQueue{signal: make(chan struct{}, 1)} }

func (q *eventQueue) push(ev MemberEvent) {
	q.mu.Lock()
	q.pending = append(q.pending, ev)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *eventQueue) take() []MemberEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	evs := q.pending
	q.pending = nil
	return evs
}
