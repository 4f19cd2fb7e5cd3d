package core

import (
	"sync/atomic"

	"github.com/kvrouter/kvrouter/affinity"
)

// Usage is what an engine's answer says of its prompt: its tokens, and how
// many of them it found cached (vLLM's
// usage.prompt_tokens_details.cached_tokens, SGLang's
// meta_info.cached_tokens). HasCached is false when the answer did not say:
// nothing is judged then.
type Usage struct {
	PromptTokens, CachedTokens int
	HasCached                  bool
}

// judge holds the replica's decisions against their engines' answers: it
// counts false and lost hits (Attribution) and calibrates the index by what
// each engine held of a predicted hit.
type judge struct {
	thresholds *atomic.Pointer[affinity.Thresholds] // the replica's, SetThresholds
	reg        *registry
	index      *affinity.Index
	blockSize  int
	kv         KVSource // nil without the engines' events
	// noCalibration keeps the index's budgets as set (Config.NoCalibration);
	// judged, when set, sends each judgement to the peers (loadsync's
	// Judged, set with the gossip).
	noCalibration bool
	judged        func(w uint32, held bool)
	counts        attributionCounts
}

// engineHit is the engine's side of a hit, by the same rule the policy
// predicts one: its cached share of the prompt exceeds the cache threshold.
func (j *judge) engineHit(u Usage) bool {
	return j.thresholds.Load().Hit(u.CachedTokens, u.PromptTokens)
}

// Cause is why an engine missed a prefix that the replica knew, by the
// answer, another worker to hold: a lost hit.
type Cause uint8

// The causes of a lost hit, decided in this order.
const (
	// CauseShed: the decision matched an owner over the threshold and
	// judged it overloaded on the load it saw.
	CauseShed Cause = iota
	// CauseIneligible: the deepest owner the index knew, over the
	// threshold, was not a candidate (unhealthy, draining, another role
	// or model, or an attempt already tried).
	CauseIneligible
	// CauseBelowThreshold: the decision knew the prefix only for a share
	// of the prompt not above the threshold, and by the answer a fact
	// above it, for another worker, had arrived.
	CauseBelowThreshold
	// CausePeerFactLate: the decision knew nothing of the prefix, and by
	// the answer a fact above the threshold, for another worker, had
	// arrived: a peer's decision that had not reached this replica yet.
	CausePeerFactLate
	numCauses
)

// Causes lists every Cause, in the order they are decided.
var Causes = []Cause{CauseShed, CauseIneligible, CauseBelowThreshold, CausePeerFactLate}

func (c Cause) String() string {
	return [...]string{"shed", "ineligible", "below_threshold", "peer_fact_late"}[c]
}

// Attribution is what a replica counted of its judged decisions: those
// whose answer said how much of the prompt the engine found cached.
// Cumulative.
type Attribution struct {
	// Judged is the answers that carried cached tokens.
	Judged uint64
	// PredictedHits is the judged decisions predicted as hits;
	// PredictedHitsByFact splits them by where the belief came from, as
	// FalseHitsByFact does its false ones.
	PredictedHits       uint64
	PredictedHitsByFact [numFacts]uint64
	// EngineHits is the judged answers whose cached share of the prompt
	// exceeded the cache threshold.
	EngineHits uint64
	// FalseHits is the decisions predicted as hits whose engine's cached
	// share did not exceed the threshold: the index believed in a prefix
	// the engine did not hold. FalseHitsByFact splits them by where the
	// belief came from (index FactOwn, FactPeer, FactEngine).
	// FalseHitsUncached is those whose engine found not one token of the
	// prompt cached; FalseHitsEvicted those of FactEngine whose engine's
	// events removed some of the prompt's blocks after the decision: the
	// index was right when it decided, and the engine evicted the blocks
	// before it admitted the request.
	FalseHits         uint64
	FalseHitsByFact   [numFacts]uint64
	FalseHitsUncached uint64
	FalseHitsEvicted  uint64
	// Lost counts lost hits by Cause.
	Lost [numCauses]uint64
	// ColdMisses is the answers without a hit, predicted so, for which the
	// replica knew no other worker holding the prefix above the threshold,
	// at the decision or by the answer: first sights of a prefix, or facts
	// that never reached it. Not lost hits: a replica cannot tell them from
	// a new conversation.
	ColdMisses uint64
	// PromptTokens and CachedTokens sum the judged answers' usage.
	PromptTokens, CachedTokens uint64
}

// LostTotal is the number of lost hits of every cause.
func (a Attribution) LostTotal() uint64 {
	var n uint64
	for _, v := range a.Lost {
		n += v
	}
	return n
}

type attributionCounts struct {
	judged, predictedHits, engineHits, falseHits, falseUncached, falseEvicted, cold, prompt, cached atomic.Uint64
	falseByFact, predictedByFact                                                                    [numFacts]atomic.Uint64
	lost                                                                                            [numCauses]atomic.Uint64
}

// Answered judges decision d against its engine's answer: a predicted hit
// the engine did not back is a false hit; an answer without a hit where the
// replica knew, at the decision or by now, of another worker holding the
// prefix above the threshold is a lost hit, by cause. Every predicted hit
// also calibrates the worker's index budget by what its engine held
// (affinity.Index.Calibrate), so that an index charging a worker less than
// its engine caches stops believing in what the engine evicted; the
// judgement goes to the peers with the next report, and they calibrate
// their indexes alike (remoteCalibration).
func (r *Replica) Answered(d Decided, u Usage) { r.judge.answered(d, u) }

// Attribution reads the counts of the judged decisions. Safe at any time.
func (r *Replica) Attribution() Attribution { return r.judge.attribution() }

func (j *judge) answered(d Decided, u Usage) {
	if !d.routed || !u.HasCached || u.PromptTokens <= 0 {
		return
	}
	c := &j.counts
	c.judged.Add(1)
	c.prompt.Add(uint64(u.PromptTokens))
	c.cached.Add(uint64(min(u.CachedTokens, u.PromptTokens)))
	hit := j.engineHit(u)
	if d.Hit {
		c.predictedHits.Add(1)
		c.predictedByFact[d.Fact].Add(1)
		j.calibrate(d.Worker, hit)
	}
	switch {
	case hit:
		c.engineHits.Add(1)
	case d.Hit:
		c.falseHits.Add(1)
		c.falseByFact[d.Fact].Add(1)
		if u.CachedTokens <= 0 {
			c.falseUncached.Add(1)
		}
		if d.Fact == FactEngine && j.kv.EvictedSince(uint32(d.Worker), d.kvKeys, d.at) {
			c.falseEvicted.Add(1)
		}
	default:
		j.attributeMiss(d)
	}
}

// attributeMiss counts an engine's miss on a decision predicted a miss.
func (j *judge) attributeMiss(d Decided) {
	c := &j.counts
	switch {
	case d.Shed:
		c.lost[CauseShed].Add(1)
	case d.Ineligible:
		c.lost[CauseIneligible].Add(1)
	case !j.heldElsewhere(d):
		c.cold.Add(1)
	case d.Matched > 0:
		c.lost[CauseBelowThreshold].Add(1)
	default:
		c.lost[CausePeerFactLate].Add(1)
	}
}

// heldElsewhere reports whether the index now knows a worker other than
// d's holding more of d's prompt than the cache threshold.
func (j *judge) heldElsewhere(d Decided) bool {
	k := j.reg.load()
	if len(d.hashes) == 0 || k.pool == nil {
		return false
	}
	var buf [8]affinity.WorkerID
	depth, _ := j.index.Match(d.hashes, k.pool.Without(d.Worker), buf[:0])
	if depth < 0 {
		return false
	}
	return j.thresholds.Load().Hit(min((depth+1)*j.blockSize, d.Total), d.Total)
}

// attribution reads the counts. Safe at any time.
func (j *judge) attribution() Attribution {
	c := &j.counts
	a := Attribution{Judged: c.judged.Load(), PredictedHits: c.predictedHits.Load(), EngineHits: c.engineHits.Load(),
		FalseHits: c.falseHits.Load(), FalseHitsUncached: c.falseUncached.Load(),
		FalseHitsEvicted: c.falseEvicted.Load(), ColdMisses: c.cold.Load(), PromptTokens: c.prompt.Load(),
		CachedTokens: c.cached.Load()}
	for i := range c.falseByFact {
		a.FalseHitsByFact[i] = c.falseByFact[i].Load()
		a.PredictedHitsByFact[i] = c.predictedByFact[i].Load()
	}
	for i := range c.lost {
		a.Lost[i] = c.lost[i].Load()
	}
	return a
}

// calibrate corrects w's index budget by its engine's answer to a predicted
// hit, and has the peers do the same.
func (j *judge) calibrate(w affinity.WorkerID, held bool) {
	if j.noCalibration {
		return
	}
	j.index.Calibrate(w, held)
	if j.judged != nil {
		j.judged(uint32(w), held)
	}
}
