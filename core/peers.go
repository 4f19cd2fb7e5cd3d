package core

import (
	"sync/atomic"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/loadsync"
)

// The trust boundary on what peers gossip: every load, ownership fact and
// verdict another replica sends passes through here before it reaches the
// load table, the index or the verdicts' owner. Only workers of the registry
// (which Raft, not gossip, decides) are let through (loads are filtered as
// they arrive, by loadsync's KnownWorker), so what this replica holds never
// grows with what peers send, and a fact is charged at most maxFactSpan
// blocks, so one fact cannot wipe a worker's index.
//
// The gossip key is what keeps strangers out of the gossip; this keeps a
// peer, or a stranger where there is no key, from making up workers.

// maxFactSpan is the most blocks one gossiped fact is charged for: the
// longest chain a router hashes for one request (affinity.MaxChainBlocks).
// A longer span can only be made up.
const maxFactSpan = affinity.MaxChainBlocks

// registry holds the registry's workers, swapped whole by SetRegistry:
// read on the request path and by every gossip callback, never locked.
type registry struct{ workers atomic.Pointer[knownWorkers] }

func (g *registry) load() *knownWorkers { return g.workers.Load() }

func (g *registry) isKnown(w uint32) bool {
	_, ok := g.load().byID[affinity.WorkerID(w)]
	return ok
}

// peerGate is the trust boundary itself: the gossip's callbacks, which hand
// what peers say of known workers to the load table's entries, the index
// and the verdicts' owner.
type peerGate struct {
	reg        *registry
	index      *affinity.Index
	heard      func(hashes []uint64, w affinity.WorkerID) // Config.Heard
	onVerdicts func(origin string, vs []loadsync.Verdict) // Config.OnVerdicts
}

// knownWorkers is one registry's workers, swapped whole by SetRegistry.
type knownWorkers struct {
	byID map[affinity.WorkerID]*affinity.Load
	// inOrder lists the load entries in id order: load reports list them
	// in a stable order, so a simulated run repeats byte for byte.
	inOrder []*affinity.Load
	// pool holds every known worker: what attribution asks the index.
	pool *affinity.Pool
}

// localLoads reports this replica's own in-flight counts to the gossip.
func (g *peerGate) localLoads(dst []loadsync.WorkerLoad) []loadsync.WorkerLoad {
	return g.ownPerWorker(dst, (*affinity.Load).Local)
}

// localBacklogs reports this replica's own prefill backlogs to the gossip.
func (g *peerGate) localBacklogs(dst []loadsync.WorkerLoad) []loadsync.WorkerLoad {
	return g.ownPerWorker(dst, (*affinity.Load).Backlog)
}

// ownPerWorker appends of(worker) for every known worker where it is not
// zero: a load report's entries.
func (g *peerGate) ownPerWorker(dst []loadsync.WorkerLoad, of func(*affinity.Load) int64) []loadsync.WorkerLoad {
	for _, l := range g.reg.load().inOrder {
		if n := of(l); n != 0 {
			dst = append(dst, loadsync.WorkerLoad{Worker: uint32(l.ID()), InFlight: n})
		}
	}
	return dst
}

// remoteLoad takes the peers' in-flight count for a known worker.
func (g *peerGate) remoteLoad(w uint32, n int64) { g.setKnown(w, n, (*affinity.Load).SetRemote) }

// remoteBacklog takes the peers' prefill backlog for a known worker.
func (g *peerGate) remoteBacklog(w uint32, n int64) {
	g.setKnown(w, n, (*affinity.Load).SetRemoteBacklog)
}

// setKnown hands a peers' sum to a known worker's counters; what peers say
// of any other worker is dropped.
func (g *peerGate) setKnown(w uint32, n int64, set func(*affinity.Load, int64)) {
	if l, ok := g.reg.load().byID[affinity.WorkerID(w)]; ok {
		set(l, n)
	}
}

// ownership takes a peer's fact about a known worker, its span capped.
func (g *peerGate) ownership(f loadsync.Fact) {
	if !g.reg.isKnown(f.Worker) {
		return
	}
	w := affinity.WorkerID(f.Worker)
	g.index.Learn(affinity.Fact{Hash: f.Hash, Worker: w, Span: min(f.Span, maxFactSpan)})
	if g.heard != nil {
		g.heard([]uint64{f.Hash}, w)
	}
}

// remoteCalibration applies a peer's judgements of its predicted hits on a
// known worker to this replica's index, the misses first: the peer's
// engine answers say how much of the worker's cache the index may believe
// in, whichever replica heard them. loadsync caps the counts.
func (g *peerGate) remoteCalibration(c loadsync.Calibration) {
	if !g.reg.isKnown(c.Worker) {
		return
	}
	w := affinity.WorkerID(c.Worker)
	for range c.Missed {
		g.index.Calibrate(w, false)
	}
	for range c.Held {
		g.index.Calibrate(w, true)
	}
}

// remoteVerdicts passes on a peer's verdicts about known workers; nil (the
// peer withdrew them, left, died or went silent) passes as nil.
func (g *peerGate) remoteVerdicts(origin string, vs []loadsync.Verdict) {
	if g.onVerdicts == nil {
		return
	}
	if vs == nil {
		g.onVerdicts(origin, nil)
		return
	}
	kept := make([]loadsync.Verdict, 0, len(vs))
	for _, v := range vs {
		if g.reg.isKnown(v.Worker) {
			kept = append(kept, v)
		}
	}
	g.onVerdicts(origin, kept)
}

// extendingSink passes the routers' ownership decisions to the gossip, with
// what a hit matched before, so that peers are charged only the new blocks.
type extendingSink struct{ st *loadsync.State }

var _ affinity.ExtendingSink = extendingSink{}

func (s extendingSink) Owned(hashes []uint64, w affinity.WorkerID) { s.st.Owned(hashes, uint32(w)) }

func (s extendingSink) OwnedBeyond(hashes []uint64, known int, w affinity.WorkerID) {
	s.st.OwnedBeyond(hashes, known, uint32(w))
}

// plainSink announces decisions without what a hit matched before.
type plainSink struct{ st *loadsync.State }

func (s plainSink) Owned(hashes []uint64, w affinity.WorkerID) { s.st.Owned(hashes, uint32(w)) }

// heardSink shows every decision to Config.Heard, then passes it on.
type heardSink struct {
	next  affinity.OwnershipSink // nil: no gossip
	heard func([]uint64, affinity.WorkerID)
}

func (s heardSink) Owned(hashes []uint64, w affinity.WorkerID) {
	s.heard(hashes, w)
	if s.next != nil {
		s.next.Owned(hashes, w)
	}
}

func (s heardSink) OwnedBeyond(hashes []uint64, known int, w affinity.WorkerID) {
	s.heard(hashes, w)
	switch next := s.next.(type) {
	case affinity.ExtendingSink:
		next.OwnedBeyond(hashes, known, w)
	case nil:
	default:
		next.Owned(hashes, w)
	}
}
