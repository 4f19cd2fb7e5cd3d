package kvevents

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// relayQueue holds the batches this replica applied from the engines that
// dial it, packed into relay packets, until the gossip sends them.
type relayQueue struct {
	mu      sync.Mutex
	w       relayWriter
	bytes   int
	beatAt  time.Time
	dropped atomic.Uint64
}

// add packs worker's batch a, unless limit bytes already wait (then the
// peers find the gap at the next heartbeat and fetch a snapshot).
func (q *relayQueue) add(worker uint32, a Applied, limit int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	size := batchHeader + 9*len(a.Ops)
	if q.bytes+size > limit {
		q.dropped.Add(1)
		return
	}
	q.w.batch(worker, a)
	q.bytes += size
}

// take returns the packets packed so far.
func (q *relayQueue) take() [][]byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.w.flush()
	pkts := q.w.packets
	q.w.packets, q.bytes = nil, 0
	return pkts
}

// Outbox is what this replica tells its peers now: the batches applied
// from the engines that dial it since the last call, and, every
// Heartbeat, where it stands on each of those engines. The gossip sends
// every packet to every peer; call it every few milliseconds.
func (h *Hub) Outbox(now time.Time) [][]byte {
	pkts := h.relay.take()
	if !h.heartbeatDue(now) {
		return pkts
	}
	w := relayWriter{origin: h.cfg.Origin, geo: h.geometry()}
	for id, e := range h.table.Load().entries {
		if e.claim.Load() == nil {
			continue
		}
		epoch, next, started := e.view.position()
		w.heartbeat(Heartbeat{Worker: id, Epoch: epoch, Next: next, Started: started})
	}
	w.flush()
	return append(pkts, w.packets...)
}

func (h *Hub) heartbeatDue(now time.Time) bool {
	q := &h.relay
	q.mu.Lock()
	defer q.mu.Unlock()
	if now.Before(q.beatAt) {
		return false
	}
	q.beatAt = now.Add(h.cfg.Heartbeat)
	return true
}

// RelayStats counts the relay's traffic on this replica.
type RelayStats struct {
	// Dropped counts batches not sent because MaxRelayBytes waited.
	Dropped uint64
	// Received counts batch records taken from peers, Unknown those for a
	// worker this replica does not know, Malformed the packets refused, and
	// Mismatched those of peers whose sets are of another geometry.
	Received, Unknown, Malformed, Mismatched uint64
	// Fetched and Restored count snapshots asked of peers and taken.
	Fetched, Restored uint64
}

type relayCounters struct {
	received, unknown, malformed, mismatched, fetched, restored atomic.Uint64
}

// Receive takes a relay packet from a peer: each batch goes to its worker's
// view (View.Relayed), each heartbeat notes that the peer hears the worker
// (View.HeardOf). A packet that does not decode changes nothing.
func (h *Hub) Receive(pkt []byte, now time.Time) error {
	t := h.table.Load()
	until := now.Add(3 * h.cfg.Heartbeat)
	err := DecodeRelay(pkt, h.geometry(), func(origin string, b RelayedBatch) {
		h.rc.received.Add(1)
		if e := t.entries[b.Worker]; e != nil {
			e.view.Relayed(origin, b)
		} else {
			h.rc.unknown.Add(1)
		}
	}, func(origin string, hb Heartbeat) {
		if e := t.entries[hb.Worker]; e != nil {
			e.view.HeardOf(origin, hb, until)
		}
	})
	switch {
	case errors.Is(err, ErrGeometry):
		h.rc.mismatched.Add(1)
	case err != nil:
		h.rc.malformed.Add(1)
	}
	return err
}

func (h *Hub) geometry() geometry { return geometry{h.cfg.BlockSize, h.cfg.MaxBlocks} }

// RelayStats is the relay's counts so far.
func (h *Hub) RelayStats() RelayStats {
	c := &h.rc
	return RelayStats{Dropped: h.relay.dropped.Load(), Received: c.received.Load(), Unknown: c.unknown.Load(),
		Malformed: c.malformed.Load(), Mismatched: c.mismatched.Load(), Fetched: c.fetched.Load(),
		Restored: c.restored.Load()}
}

// Snapshots are this replica's trusted views of the workers asked for
// (View.Snapshot), for a peer.
func (h *Hub) Snapshots(workers []uint32) map[uint32]Snapshot {
	t := h.table.Load()
	out := map[uint32]Snapshot{}
	for _, id := range workers {
		if e := t.entries[id]; e != nil {
			if s, ok := e.view.Snapshot(); ok {
				out[id] = s
			}
		}
	}
	return out
}

// mendInterval is how often the hub looks for views that want a snapshot,
// and warmAfter how long a view that never heard its engine waits between
// asks of a peer.
const (
	mendInterval = 50 * time.Millisecond
	warmAfter    = time.Second
)

// mend is the hub's goroutine: it fetches the snapshots its views want
// (a gap in a peer's relay) and those of views that never heard their
// engine (a replica that starts), from the peers.
func (h *Hub) mend(ctx context.Context) {
	defer close(h.done)
	if h.cfg.Fetch == nil {
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(mendInterval)
	defer tick.Stop()
	warm := map[uint32]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.mendOnce(ctx, warm)
		}
	}
}

// mendOnce asks each peer once for what the views want of it.
func (h *Hub) mendOnce(ctx context.Context, warm map[uint32]time.Time) {
	now := h.cfg.Now()
	t := h.table.Load()
	ask := map[string][]uint32{}
	var cold []uint32
	for id, e := range t.entries {
		if origin, ok := e.view.Wanted(); ok && origin != "" {
			ask[origin] = append(ask[origin], id)
			continue
		}
		if _, _, started := e.view.position(); !started && now.After(warm[id]) {
			cold = append(cold, id)
			warm[id] = now.Add(warmAfter)
		}
	}
	if len(cold) > 0 && h.cfg.Peers != nil {
		if peers := h.cfg.Peers(); len(peers) > 0 {
			origin := peers[rand.IntN(len(peers))]
			ask[origin] = append(ask[origin], cold...)
		}
	}
	for origin, ids := range ask {
		h.fetch(ctx, t, origin, ids)
	}
	for id := range warm {
		if t.entries[id] == nil {
			delete(warm, id)
		}
	}
}

func (h *Hub) fetch(ctx context.Context, t *hubTable, origin string, ids []uint32) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h.rc.fetched.Add(1)
	snaps, err := h.cfg.Fetch(ctx, origin, ids)
	if err != nil {
		return
	}
	for id, s := range snaps {
		if e := t.entries[id]; e != nil && e.view.Restore(s) {
			h.rc.restored.Add(1)
		}
	}
}

// fromPeers fills worker id's view from the first live peer that has a
// trusted one (View.Restore), and says whether one did.
func (h *Hub) fromPeers(ctx context.Context, id uint32, v *View) bool {
	if h.cfg.Fetch == nil || h.cfg.Peers == nil {
		return false
	}
	peers := h.cfg.Peers()
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	for _, origin := range peers[:min(len(peers), 3)] {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h.rc.fetched.Add(1)
		snaps, err := h.cfg.Fetch(ctx, origin, []uint32{id})
		cancel()
		if s, ok := snaps[id]; err == nil && ok && v.Restore(s) {
			h.rc.restored.Add(1)
			return true
		}
	}
	return false
}
