package fleet

import (
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
)

// Lost attributes every request that one all-knowing replica would have
// routed as a hit and the tier did not, to the first reason that explains
// it. The all-knowing replica (the oracle) holds every decision of every
// replica in one index, charged one block per block as the engine holds
// them, and routes on the exact in-flight counts: what a single router would
// have known at that instant, given the tier's history. Each field counts
// requests; their sum is the oracle's hits that the tier missed.
type Lost struct {
	// NeverArrived: the replica had never heard of the oracle's owner for
	// any block of the request's matched prefix (the fact was still on its
	// way, lost, or never sent).
	NeverArrived int `json:"never_arrived"`
	// Evicted: the replica had heard of the owner for a block deeper than
	// it matched, but its index had evicted that fact while the oracle's
	// still held it: the replica charged its owner more than the engine
	// holds (or aged it out in another order).
	Evicted int `json:"evicted"`
	// BelowThreshold: the replica never heard of the owner deeper than a
	// shallower block (a sparse checkpoint) it matched, and that share of
	// the text did not exceed --cache-threshold.
	BelowThreshold int `json:"below_threshold"`
	// Shed: the replica matched the prefix but judged its owner overloaded
	// on its merged load (stale or inflated), where the exact load did not.
	Shed int `json:"shed"`
	// Ineligible: the oracle's owner was not among the replica's candidates.
	Ineligible int `json:"ineligible"`
}

// Total is the number of requests lost.
func (l Lost) Total() int {
	return l.NeverArrived + l.Evicted + l.BelowThreshold + l.Shed + l.Ineligible
}

// oracle is the all-knowing replica that fleetsim measures the tier against.
// It never reserves nor routes: it is asked what it would do, then told
// where the tier sent the request.
type oracle struct {
	loads *affinity.LoadTable
	index *affinity.Index
	pool  *affinity.Pool
	// live is pool less the workers killed (Config.Kills): its candidates.
	live   *affinity.Pool
	policy affinity.Policy
	// tables are the distinct load tables of the tier, whose local counts
	// add up to the exact in-flight count of every worker.
	tables    [][]*affinity.Load
	blockSize int
	hits      int
	lost      Lost
	// falseHits counts the tier's hits on a worker whose engine held no
	// more than the threshold's share of the prompt.
	falseHits int
	threshold affinity.Thresholds
}

func newOracle(cfg Config, clk clock.PassiveClock, replicas []*replica) (*oracle, error) {
	o := &oracle{loads: affinity.NewLoadTable(nil), index: affinity.NewIndex(clk, indexBudget(cfg)),
		blockSize: cfg.BlockSize, threshold: cfg.Thresholds}
	var members []*affinity.Load
	for id := 1; id <= cfg.routedWorkers(); id++ {
		members = append(members, o.loads.Get(affinity.WorkerID(id)))
	}
	o.pool = affinity.NewPool(members)
	o.live = o.pool
	// The oracle's policy draws its own bits, so asking it changes no
	// replica's random stream.
	p, err := affinity.NewPolicy(cfg.settings(cfg.Policy, seeded(cfg.Seed, streamOracle).Uint64), o.index)
	if err != nil {
		return nil, err
	}
	o.policy = p
	seen := map[*affinity.LoadTable]bool{}
	for _, r := range replicas {
		if !seen[r.loads] {
			seen[r.loads] = true
			o.tables = append(o.tables, r.own[:cfg.routedWorkers()])
		}
	}
	return o, nil
}

// wouldHit reports whether the oracle would route req as a hit now, and to
// which owner, among the live workers but those of avoid (the workers a
// cut stream used).
func (o *oracle) wouldHit(req *affinity.Request, avoid []affinity.WorkerID) (affinity.WorkerID, bool) {
	for i := range o.pool.Len() {
		var n int64
		for _, t := range o.tables {
			n += t[i].Local()
		}
		o.loads.SetRemote(affinity.WorkerID(i+1), n)
	}
	c := o.policy.Select(req, o.live.Without(avoid...))
	return c.Load.ID(), c.Hit
}

// forget drops a killed worker: from the candidates, and its blocks from
// the index, as the tier's replicas do.
func (o *oracle) forget(w affinity.WorkerID) {
	o.live = o.live.Without(w)
	o.index.Forget(w)
}

// judge compares the tier's decision over pool on replica r with the
// oracle's, then records where the request went.
func (o *oracle) judge(r *replica, pool *affinity.Pool, req *affinity.Request, owner affinity.WorkerID, oracleHit bool, d affinity.Decision) {
	if oracleHit {
		o.hits++
		// A miss placed on the oracle's owner all the same (rendezvous
		// placement agrees without knowing) loses nothing.
		if !d.Hit && d.Worker != owner {
			o.attribute(r, pool, req, owner, d)
		}
	}
	if len(req.Hashes) > 0 {
		o.index.Insert(req.Hashes, d.Worker)
	}
}

// attribute finds why replica r, deciding over pool, missed what the
// oracle matched on owner.
func (o *oracle) attribute(r *replica, pool *affinity.Pool, req *affinity.Request, owner affinity.WorkerID, d affinity.Decision) {
	switch {
	case !pool.Contains(owner):
		o.lost.Ineligible++
	case d.Shed:
		o.lost.Shed++
	case r.heard.any(req.Hashes[d.Matched/o.blockSize:], owner):
		// It had heard of the owner deeper than it matched.
		o.lost.Evicted++
	case d.Matched > 0:
		// It knew the owner, or another, only for a shallower block.
		o.lost.BelowThreshold++
	default:
		o.lost.NeverArrived++
	}
}

// checkHit counts a hit of the tier that the worker's engine does not back:
// it holds cached of the prompt's tokens.
func (o *oracle) checkHit(d affinity.Decision, cached, tokens int) {
	if d.Hit && !o.threshold.Hit(cached, tokens) {
		o.falseHits++
	}
}

// heardSet remembers every (block, worker) fact a replica ever recorded, made
// or learned, evicted or not, so that a miss can tell "never arrived" from
// "evicted".
type heardSet map[uint64]struct{}

func heardKey(h uint64, w affinity.WorkerID) uint64 {
	return h ^ (uint64(w)+1)*0x9e3779b97f4a7c15
}

func (s heardSet) add(h uint64, w affinity.WorkerID) { s[heardKey(h, w)] = struct{}{} }

// any reports whether any block of hashes was ever recorded for w.
func (s heardSet) any(hashes []uint64, w affinity.WorkerID) bool {
	for _, h := range hashes {
		if _, ok := s[heardKey(h, w)]; ok {
			return true
		}
	}
	return false
}

// Judged is what the replicas' cores (core) counted of their
// decisions against the engines' answers, summed over the replicas: the
// product's own attribution, as vllm_router_false_hits_total,
// vllm_router_lost_hits_total{cause} and vllm_router_cold_misses_total
// export it on a real replica. Unlike Lost it knows nothing the replica did
// not: no oracle.
type Judged struct {
	FalseHits int `json:"false_hits"`
	// FalseFromOwn and FalseFromPeer split FalseHits by where the index's
	// belief came from: the replica's own decision, or a peer's gossip.
	FalseFromOwn  int `json:"false_from_own"`
	FalseFromPeer int `json:"false_from_peer"`
	// Lost hits by cause (core.Cause).
	Shed           int `json:"shed"`
	Ineligible     int `json:"ineligible"`
	BelowThreshold int `json:"below_threshold"`
	PeerFactLate   int `json:"peer_fact_late"`
	// ColdMisses are engine misses no replica fact explained.
	ColdMisses int `json:"cold_misses"`
}

// LostTotal is the lost hits of every cause.
func (j Judged) LostTotal() int { return j.Shed + j.Ineligible + j.BelowThreshold + j.PeerFactLate }

// judged sums the replicas' attribution.
func judged(replicas []*replica) Judged {
	var j Judged
	for _, r := range replicas {
		a := r.core.Attribution()
		j.FalseHits += int(a.FalseHits)
		j.FalseFromOwn += int(a.FalseHitsByFact[core.FactOwn])
		j.FalseFromPeer += int(a.FalseHitsByFact[core.FactPeer])
		j.Shed += int(a.Lost[core.CauseShed])
		j.Ineligible += int(a.Lost[core.CauseIneligible])
		j.BelowThreshold += int(a.Lost[core.CauseBelowThreshold])
		j.PeerFactLate += int(a.Lost[core.CausePeerFactLate])
		j.ColdMisses += int(a.ColdMisses)
	}
	return j
}
