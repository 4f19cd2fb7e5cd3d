package loadsync

import (
	"fmt"
	"sync"

	"github.com/hashicorp/memberlist"
)

// Member is one live replica of the cluster as memberlist sees it.
type Member struct {
	// Name is the replica's node name (its Origin).
	Name string
	// Addr is its gossip address, ip:port.
	Addr string
	// BootEpoch is the epoch it announced; zero if its metadata did not
	// decode.
	BootEpoch uint64
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

func memberOf(n *memberlist.Node, self string) Member {
	m := Member{Name: n.Name, Addr: n.Address(), Self: n.Name == self}
	if meta, err := decodeMeta(n.Meta); err == nil {
		m.BootEpoch = meta.epoch
	}
	return m
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
