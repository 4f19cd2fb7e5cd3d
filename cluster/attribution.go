package cluster

import (
	"fmt"
	"io"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/exposition"
)

// The attribution of this replica's decisions against the engines' answers
// (core's Attribution): every decision of a prefix-aware router
// whose 2xx answer said how much of the prompt the engine found cached
// (usage.prompt_tokens_details.cached_tokens, SGLang's
// meta_info.cached_tokens) is judged. An engine hit is a cached share of
// the prompt above --cache-threshold, the rule the policy predicts with.

// attributionFamilies are the counters written at scrape time from the
// core's counts, with their help texts.
var attributionFamilies = []struct {
	name, help string
	value      func(core.Attribution) uint64
}{
	{"vllm_router_judged_decisions_total", "Decisions whose answer said how many prompt tokens the engine found cached.",
		func(a core.Attribution) uint64 { return a.Judged }},
	{"vllm_router_predicted_hits_total", "Judged decisions the router predicted as cache hits.",
		func(a core.Attribution) uint64 { return a.PredictedHits }},
	{"vllm_router_engine_hits_total", "Judged answers whose cached share of the prompt exceeded --cache-threshold.",
		func(a core.Attribution) uint64 { return a.EngineHits }},
	{"vllm_router_false_hits_total", "Decisions predicted as hits whose engine's cached share of the prompt did not exceed --cache-threshold: the index believed in a prefix the engine did not hold.",
		func(a core.Attribution) uint64 { return a.FalseHits }},
	{"vllm_router_false_hits_uncached_total", "False hits whose engine found not one token of the prompt cached.",
		func(a core.Attribution) uint64 { return a.FalseHitsUncached }},
	{"vllm_router_false_hits_evicted_total", "False hits on the blocks the engine's own KV events said it held (fact engine) whose engine removed some of the prompt's blocks after the decision: evicted before the engine admitted the request, not a stale index.",
		func(a core.Attribution) uint64 { return a.FalseHitsEvicted }},
	{"vllm_router_cold_misses_total", "Engine misses predicted as misses for which no other worker was known to hold the prefix, at the decision or by the answer (no_fact: not counted as lost).",
		func(a core.Attribution) uint64 { return a.ColdMisses }},
	{"vllm_router_judged_prompt_tokens_total", "Prompt tokens of the judged answers.",
		func(a core.Attribution) uint64 { return a.PromptTokens }},
	{"vllm_router_judged_cached_tokens_total", "Cached prompt tokens of the judged answers, as the engines reported them.",
		func(a core.Attribution) uint64 { return a.CachedTokens }},
}

const (
	lostHitsFamily = "vllm_router_lost_hits_total"
	lostHitsHelp   = "Engine misses on a prefix another worker was known to hold above --cache-threshold, by cause: shed (the owner judged overloaded), ineligible (the owner not a candidate), below_threshold (only a shallower part known at the decision), peer_fact_late (nothing known at the decision, a fact arrived by the answer)."
	falseByFact    = "vllm_router_false_hits_by_fact_total"
	predByFact     = "vllm_router_predicted_hits_by_fact_total"
	predByFactHelp = "Judged decisions predicted as hits, by where the belief came from (as vllm_router_false_hits_by_fact_total): with --kv-events, engine is the decisions made on the engine's own events, whose false share is what the events cost."
	falseByFactHlp = "False hits by where the belief came from: own (this replica's decision) or peer (a peer's gossip), an in-flight reservation with --kv-events; engine (the blocks the engine's own KV events said it held)."
	calibSent      = "vllm_router_calibrations_sent_total"
	calibSentHelp  = "Per-worker sums of this replica's judged predicted hits sent to its peers (one per worker judged in a load report interval)."
	calibHeard     = "vllm_router_calibrations_learned_total"
	calibHeardHelp = "Peers' per-worker judgements of their predicted hits that calibrated this replica's index budgets."
	scaleFamily    = "vllm_router_index_budget_scale"
	scaleHelp      = "A worker's index budget as a share of its capacity, as its engine's answers calibrated it (1: as configured; at least 0.1)."
)

// The attribution families' help texts, described once from the table
// above, so the exposition's checks know them as they know every family.
var _ = exposition.Describe(attributionHelp())

func attributionHelp() map[string]string {
	help := map[string]string{lostHitsFamily: lostHitsHelp, falseByFact: falseByFactHlp, predByFact: predByFactHelp, scaleFamily: scaleHelp,
		calibSent: calibSentHelp, calibHeard: calibHeardHelp}
	for _, f := range attributionFamilies {
		help[f.name] = f.help
	}
	return help
}

// writeAttribution writes the attribution counters.
func (f clusterFamilies) writeAttribution(w io.Writer) {
	a := f.core.Attribution()
	for _, f := range attributionFamilies {
		metrics.WriteCounterUint64(w, f.name, f.value(a))
	}
	metrics.WriteMetadataIfNeeded(w, lostHitsFamily, "counter")
	for _, c := range core.Causes {
		fmt.Fprintf(w, "%s{cause=%q} %d\n", lostHitsFamily, c.String(), a.Lost[c])
	}
	metrics.WriteMetadataIfNeeded(w, falseByFact, "counter")
	for _, f := range []core.Fact{core.FactOwn, core.FactPeer, core.FactEngine} {
		fmt.Fprintf(w, "%s{fact=%q} %d\n", falseByFact, f.String(), a.FalseHitsByFact[f])
	}
	metrics.WriteMetadataIfNeeded(w, predByFact, "counter")
	for _, f := range []core.Fact{core.FactOwn, core.FactPeer, core.FactEngine} {
		fmt.Fprintf(w, "%s{fact=%q} %d\n", predByFact, f.String(), a.PredictedHitsByFact[f])
	}
	if f.sync != nil {
		st := f.sync.Stats()
		metrics.WriteCounterUint64(w, calibSent, st.CalibrationsSent)
		metrics.WriteCounterUint64(w, calibHeard, st.CalibrationsLearned)
	}
	f.writeBudgetScales(w)
}

// writeBudgetScales writes every registered worker's calibrated budget
// scale.
func (f clusterFamilies) writeBudgetScales(w io.Writer) {
	workers := f.fsm.View().Workers()
	if len(workers) == 0 {
		return
	}
	metrics.WriteMetadataIfNeeded(w, scaleFamily, "gauge")
	for _, wk := range workers {
		fmt.Fprintf(w, "%s{worker=%q} %g\n", scaleFamily, wk.URL, f.index.Scale(affinity.WorkerID(wk.ID)))
	}
}
