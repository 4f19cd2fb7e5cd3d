package fleet

import (
	"errors"
	"fmt"
	"time"
)

// ErrGossip reports a gossip packet that a replica refused: one replica's
// State emitted what another's cannot decode, a bug the run must not hide.
var ErrGossip = errors.New("fleet: gossip packet refused")

// startGossip schedules every replica's first report, the replicas' phases
// spread evenly over one interval as independent processes would be.
func (s *simulation) startGossip() {
	if s.cfg.Sync != SyncGossip {
		return
	}
	n := time.Duration(len(s.replicas))
	for i := range s.replicas {
		at := s.cfg.GossipInterval * time.Duration(i) / n
		s.agenda.push(event{at: at, kind: evTick, target: i})
	}
}

// tick runs replica i's gossip state and sends what it emits to every peer.
func (s *simulation) tick(i int) {
	st := s.replicas[i].core
	now := s.clock.Now()
	if pkts := st.Tick(now); len(pkts) > 0 {
		for peer := range s.replicas {
			if peer == i {
				continue
			}
			if kept := s.net.send(pkts); len(kept) > 0 {
				s.agenda.push(event{at: s.clock.Elapsed() + s.net.delay, kind: evDeliver, target: peer, pkts: kept})
			}
		}
	}
	next := max(st.NextTick().Sub(epoch), s.clock.Elapsed()+1)
	s.agenda.push(event{at: next, kind: evTick, target: i})
}

// deliver hands packets to replica i's gossip state.
func (s *simulation) deliver(i int, pkts [][]byte) {
	r := s.replicas[i]
	now := s.clock.Now()
	for _, p := range pkts {
		if err := r.core.Receive(p, now); err != nil && s.err == nil {
			s.err = fmt.Errorf("%w by %s: %w", ErrGossip, r.name, err)
		}
	}
	if r.doorMoved {
		s.doors.letIn(r)
	}
}
