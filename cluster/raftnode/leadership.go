package raftnode

import (
	"sync"

	"github.com/hashicorp/raft"
)

// leadershipWatch turns raft's leader and state observations into the
// channel LeaderChanges returns.
type leadershipWatch struct {
	observer *raft.Observer

	// mu guards changed, closed when leadership or this node's Raft state
	// changes (see LeaderChanges).
	mu      sync.Mutex
	changed chan struct{}
}

func newLeadershipWatch() *leadershipWatch {
	return &leadershipWatch{changed: make(chan struct{})}
}

// changes is the channel closed at the next change (Node.LeaderChanges).
func (l *leadershipWatch) changes() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// watch starts the goroutine that turns r's leader and state observations
// into notifications, counted in waiters. It ends when stop is closed.
func (l *leadershipWatch) watch(r *raft.Raft, stop <-chan struct{}, waiters *sync.WaitGroup) {
	ch := make(chan raft.Observation, 16)
	l.observer = raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	r.RegisterObserver(l.observer)
	waiters.Add(1)
	go func() {
		defer waiters.Done()
		for {
			select {
			case <-ch:
				l.notify()
			case <-stop:
				return
			}
		}
	}()
}

// notify wakes every LeaderChanges waiter. Observations dropped
// because ch was full lose nothing: a pending one still wakes the waiters,
// and they read the live state.
func (l *leadershipWatch) notify() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.changed)
	l.changed = make(chan struct{})
}

// unwatch stops r's observations reaching the watch.
func (l *leadershipWatch) unwatch(r *raft.Raft) { r.DeregisterObserver(l.observer) }
