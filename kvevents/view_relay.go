package kvevents

import "time"

// The side of a View that the peers drive: the batches a peer that hears
// the engine relays (relay.go), its word that it hears it, and the
// snapshot of its view that fills a gap.

// maxHeldBytes bounds the peers' batches a view keeps while it waits for a
// snapshot: past it they are dropped, and the snapshot, when it comes, is
// followed by another gap and another snapshot.
const maxHeldBytes = 1 << 20

// heldBytes is what a held batch counts against maxHeldBytes.
func heldBytes(b RelayedBatch) int { return 32 + 12*len(b.Ops) }

// Relayed takes (part of) a batch that peer origin applied from the
// engine. One that follows on is applied; one already applied is dropped;
// one past a gap is held, and the view wants a snapshot from origin
// (Wanted), Replaying until it has one.
func (v *View) Relayed(origin string, b RelayedBatch) {
	v.mu.Lock()
	defer v.mu.Unlock()
	applied, old := v.takeLocked(origin, b)
	switch {
	case applied:
		v.releaseHeldLocked(origin)
	case !old:
		if v.heldBytes+heldBytes(b) <= maxHeldBytes {
			b.Ops = append([]Op(nil), b.Ops...)
			v.held = append(v.held, b)
			v.heldBytes += heldBytes(b)
		}
		v.wantLocked(origin)
	}
}

// takeLocked applies b if it follows on, and says whether it did, or
// whether b was old (applied already, or of an older epoch).
func (v *View) takeLocked(origin string, b RelayedBatch) (applied, old bool) {
	if p := v.partial; p.active {
		same := b.Epoch == p.epoch && b.Seq == p.seq
		switch {
		case same && b.Part == p.part:
			v.followLocked(b)
			return true, false
		case same && b.Part < p.part:
			return false, true
		}
		// The parts that were to finish the batch under way are lost: its
		// changes are half made, and only a snapshot mends that.
		v.partial = partial{}
		v.wantLocked(origin)
	}
	next, old := v.stream.Follows(b.Applied)
	if next && b.Part == 0 {
		v.followLocked(b)
		return true, false
	}
	return false, old
}

// followLocked applies part b of a batch that follows on.
func (v *View) followLocked(b RelayedBatch) {
	v.stream.Follow(b.Applied, !b.More)
	if b.More {
		v.partial = partial{active: true, epoch: b.Epoch, seq: b.Seq, part: b.Part + 1}
		return
	}
	v.partial = partial{}
	v.noteLocked(true)
}

// partial is the relayed batch whose later parts are still to come.
type partial struct {
	active bool
	epoch  uint32
	seq    uint64
	part   uint32
}

// releaseHeldLocked applies the held batches that now follow on, and drops
// those that are old, until none moves.
func (v *View) releaseHeldLocked(origin string) {
	for moved := true; moved && len(v.held) > 0; {
		moved = false
		kept := v.held[:0]
		for _, b := range v.held {
			applied, old := v.takeLocked(origin, b)
			if applied || old {
				moved = true
				continue
			}
			kept = append(kept, b)
		}
		clear(v.held[len(kept):])
		v.held = kept
	}
	v.heldBytes = 0
	for _, b := range v.held {
		v.heldBytes += heldBytes(b)
	}
}

// HeardOf notes peer origin's heartbeat: it hears the engine, at the
// position of hb, until until (a few of its heartbeats). The view is not
// Disconnected meanwhile, and a position past its own is a gap it wants a
// snapshot for (one that has heard nothing of the engine yet is past no
// one).
func (v *View) HeardOf(origin string, hb Heartbeat, until time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if until.After(v.watch.relayedTo) {
		v.watch.relayedTo = until
	}
	e, n, started := v.stream.Position()
	if v.partial.active || !hb.Started {
		return // the batch under way will bring the view there; or there is nothing to have
	}
	if !started || hb.Epoch > e || hb.Epoch == e && hb.Next > n {
		v.wantLocked(origin)
	}
}

func (v *View) wantLocked(origin string) {
	v.wanted = true
	if origin != "" {
		v.wantFrom = origin
	}
}

// Wanted says whether the view waits for a snapshot, and from which peer.
func (v *View) Wanted() (origin string, ok bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.wantFrom, v.wanted
}

// Snapshot is a view's set and the stream's position: what a peer restores
// to hold the same (Restore).
type Snapshot struct {
	Epoch     uint32
	Next      uint64
	BlockSize int
	Names     []uint64
	Keys      []Key
}

// Snapshot is the view's set now, if it is worth a peer's while: nothing
// (ok false) for a view that is not Trusted.
func (v *View) Snapshot() (Snapshot, bool) {
	now := v.cfg.Now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.trustLocked(now) != Trusted {
		return Snapshot{}, false
	}
	epoch, next, _ := v.stream.Position()
	s := Snapshot{Epoch: epoch, Next: next, BlockSize: v.cfg.BlockSize}
	s.Names, s.Keys = v.stream.Set().Content(nil, nil)
	return s, true
}

// Restore takes a peer's snapshot in place of what the view holds, unless
// the view is already past it, and applies the held batches that follow on
// from it. It reports whether the snapshot was taken.
func (v *View) Restore(s Snapshot) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	epoch, next, started := v.stream.Position()
	behind := s.Epoch < epoch || s.Epoch == epoch && (s.Next < next || s.Next == next && !v.wanted)
	if s.BlockSize != v.cfg.BlockSize || started && behind {
		return false
	}
	v.stream.Restore(s)
	v.wanted, v.partial = false, partial{}
	v.noteLocked(true)
	v.releaseHeldLocked(v.wantFrom)
	return true
}
