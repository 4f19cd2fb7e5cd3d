package cluster

import (
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/store"
)

// peerState is the trust boundary on what peers gossip: every load,
// ownership fact and verdict another replica sends passes through it before
// it reaches the load table, the index or the monitor. Only workers of the
// registry (which Raft, not gossip, decides) are let through (loads are
// filtered as they arrive, by loadsync's KnownWorker), so what this replica
// holds never grows with what peers send, and a fact is charged at
// most maxFactSpan blocks, so one fact cannot wipe a worker's index.
//
// The gossip key is what keeps strangers out of the gossip; this keeps a
// peer, or a stranger where there is no key, from making up workers.
type peerState struct {
	known atomic.Pointer[map[affinity.WorkerID]struct{}]
	loads *affinity.LoadTable
	index *affinity.Index
}

// maxFactSpan is the most blocks one gossiped fact is charged for: the
// longest chain a router hashes for one request (affinity.MaxChainBlocks).
// A longer span can only be made up.
const maxFactSpan = affinity.MaxChainBlocks

func newPeerState(loads *affinity.LoadTable, index *affinity.Index) *peerState {
	p := &peerState{loads: loads, index: index}
	p.known.Store(&map[affinity.WorkerID]struct{}{})
	return p
}

// follow makes the workers of reg the known ones.
func (p *peerState) follow(reg *store.Registry) {
	ids := make([]affinity.WorkerID, 0, reg.Len())
	for _, w := range reg.Workers() {
		ids = append(ids, affinity.WorkerID(w.ID))
	}
	p.setKnown(ids)
}

// setKnown makes ids the known workers. A worker new to this replica gets
// its load entry now; the peers' counts for it arrive with their next full
// reports, within a second (what they sent before the registry named it was
// dropped, at the gossip's door). A worker that left loses its entry.
func (p *peerState) setKnown(ids []affinity.WorkerID) {
	known := make(map[affinity.WorkerID]struct{}, len(ids))
	old := *p.known.Load()
	for _, id := range ids {
		known[id] = struct{}{}
		p.loads.Get(id)
	}
	p.known.Store(&known)
	for id := range old {
		if _, ok := known[id]; !ok {
			p.loads.Remove(id)
		}
	}
}

func (p *peerState) isKnown(w uint32) bool {
	_, ok := (*p.known.Load())[affinity.WorkerID(w)]
	return ok
}

// remoteLoad takes the peers' in-flight count for a known worker.
func (p *peerState) remoteLoad(w uint32, n int64) {
	if !p.isKnown(w) {
		return
	}
	p.loads.SetRemote(affinity.WorkerID(w), n)
}

// ownership takes a peer's fact about a known worker, its span capped.
func (p *peerState) ownership(f loadsync.Fact) {
	if !p.isKnown(f.Worker) {
		return
	}
	p.index.Learn(affinity.Fact{Hash: f.Hash, Worker: affinity.WorkerID(f.Worker), Span: min(f.Span, maxFactSpan)})
}

// verdicts keeps a peer's verdicts about known workers, for the monitor
// (which takes a worker out only with a quorum behind a verdict).
func (p *peerState) verdicts(vs []loadsync.Verdict) []health.Verdict {
	out := make([]health.Verdict, 0, len(vs))
	for _, v := range vs {
		if p.isKnown(v.Worker) {
			out = append(out, health.Verdict{Worker: health.WorkerID(v.Worker), Kind: health.VerdictKind(v.Kind),
				Since: time.Unix(0, v.Since)})
		}
	}
	return out
}
