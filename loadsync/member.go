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
	// Release is the release it runs ("v0.1.0 or earlier" for a build that
	// announced none), and Wires the versions it speaks of each wire
	// ("gossip=3,raft-log=1,registry=1,rpc=1"; empty from such a build).
	Release, Wires string
	// Self marks this replica.
	Self bool
	// reads is the message types it reads, from its metadata.
	reads typeSet
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
	m := Member{Name: n.Name, Addr: n.Address(), State: state, Self: n.Name == self, reads: legacyReadable}
	if meta, err := decodeMeta(n.Meta); err == nil {
		b := buildOf(meta.tags, nil)
		m.BootEpoch, m.Release, m.Wires, m.reads = meta.epoch, b.release, meta.tags[tagWires], b.reads
		m.Tags = meta.tags
		for _, k := range []string{tagRelease, tagWires, tagTypes} {
			delete(m.Tags, k)
		}
	}
	return m
}

// Reads reports whether the member reads messages of type typ: it
// announced the type, or it is a build from before announcements and typ
// is one of the types those read.
func (m Member) Reads(typ byte) bool { return m.reads.has(typ) }

// memberTable is the live members, kept from memberlist's events. It exists
// because memberlist's Members hands out nodes that its goroutines go on
// changing: the events are the one place it lets us read a node under its
// lock.
type memberTable struct {
	mu sync.Mutex
	by map[string]Member
}

func (t *memberTable) init() { t.by = make(map[string]Member) }

// apply records the change and reports whether some live member but this
// replica reads no msgReport.
func (t *memberTable) apply(kind MemberEventKind, m Member) (legacy bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if kind == MemberLeft {
		delete(t.by, m.Name)
	} else {
		t.by[m.Name] = m
	}
	for _, o := range t.by {
		if !o.Self && !o.reads.has(msgReport) {
			return true
		}
	}
	return false
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
