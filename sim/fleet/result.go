package fleet

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
)

// Result is what one run measured. JSON names are the report's column
// names; rates are fractions in [0, 1].
type Result struct {
	// Policy is the policy label (see ParsePolicy), Replicas, Sync and
	// Workers the fleet's shape; PD is "P:D" for a split fleet.
	Policy   string `json:"policy"`
	Replicas int    `json:"replicas"`
	Sync     Sync   `json:"sync"`
	Workers  int    `json:"workers"`
	PD       string `json:"pd,omitempty"`

	// Requests counts the requests that completed; Errors those an engine
	// refused (a prompt larger than its KV cache).
	Requests int `json:"requests"`
	Errors   int `json:"errors"`
	// HitRate is cached / prompt tokens as the routed workers' caches saw
	// them (the prefill workers of a split fleet).
	HitRate float64 `json:"hit_rate"`
	// TTFTP50Ms and TTFTP99Ms are time to first token from arrival at the
	// load balancer, in milliseconds (through decode's first token in a
	// split fleet).
	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
	// ThroughputRPS is completed requests per second of makespan.
	ThroughputRPS float64 `json:"throughput_rps"`
	// LoadCV is the coefficient of variation (population standard deviation
	// over mean) of the routed workers' busy time: the virtual time during
	// which a worker had at least one request submitted and not done.
	LoadCV float64 `json:"load_cv"`
	// PrefillTokens is the number of prompt tokens the engines computed
	// (cache misses), all workers together.
	PrefillTokens uint64 `json:"prefill_tokens"`
	// GossipBytesPerSec is gossip payload sent by all replicas together,
	// one copy per receiving peer (lost copies included), per second of
	// makespan. Zero unless Sync is gossip.
	GossipBytesPerSec float64 `json:"gossip_bytes_per_sec"`

	// MakespanSeconds is virtual time from the first arrival to the last
	// completion.
	MakespanSeconds float64 `json:"makespan_seconds"`
	// TTFTMeanMs is the mean time to first token, in milliseconds.
	TTFTMeanMs float64 `json:"ttft_mean_ms"`
	// DoorWaitP99Ms and DoorWaitMeanMs are how long requests waited at
	// their replica's admission door (Config.Door), in milliseconds: part
	// of their TTFT.
	DoorWaitP99Ms  float64 `json:"door_wait_p99_ms,omitempty"`
	DoorWaitMeanMs float64 `json:"door_wait_mean_ms,omitempty"`
	// SlowestAtDoorMs and SlowestAfterDoorMs split the TTFT of the slowest
	// 1% of requests, on average: the time at the door and the time after
	// it (routing, the engine's queue and prefill), as realtier's table does
	// for real processes.
	SlowestAtDoorMs    float64 `json:"slowest_at_door_ms,omitempty"`
	SlowestAfterDoorMs float64 `json:"slowest_after_door_ms,omitempty"`
	// RouterHitRate is the share of requests the (prefill) router sent to
	// the owner of a prefix it matched; Shed counts the matches it gave up
	// because the owner was overloaded.
	RouterHitRate float64 `json:"router_hit_rate"`
	Shed          int     `json:"shed"`
	// OracleHitRate is the share of requests that one all-knowing replica
	// (every decision in one index, exact loads) would have routed as a
	// hit; Lost attributes those of them the tier did not.
	OracleHitRate float64 `json:"oracle_hit_rate"`
	Lost          Lost    `json:"lost"`
	// FalseHits counts the tier's hits on a worker whose engine held no
	// more than --cache-threshold of the prompt: the index remembered what
	// the engine had evicted.
	FalseHits int `json:"false_hits"`
	// Judged is the replicas' own attribution against the engines'
	// answers, the product's metrics (see Judged).
	Judged Judged `json:"judged"`
	// DecodeHitRate and DecodeLoadCV are HitRate and LoadCV of the decode
	// workers of a split fleet.
	DecodeHitRate float64 `json:"decode_hit_rate,omitempty"`
	DecodeLoadCV  float64 `json:"decode_load_cv,omitempty"`
	// Rollouts counts the closed-loop sessions (agentic rollouts) that ran
	// their last turn to completion; zero for a trace.
	Rollouts int `json:"rollouts,omitempty"`
	// PromptTokensPerRollout is the prompt tokens the routed (prefill)
	// workers computed, cache misses only, per finished rollout: what a
	// rollout cost in prefill compute.
	PromptTokensPerRollout float64 `json:"prompt_tokens_per_rollout,omitempty"`
	// RolloutsPerMin is finished rollouts per minute of makespan.
	RolloutsPerMin float64 `json:"rollouts_per_min,omitempty"`
	// PrefillQueueMean and PrefillQueueMax are the routed (prefill)
	// workers' waiting queues (requests submitted and not admitted, as
	// vllm:num_requests_waiting), summed over those workers, sampled every
	// second of virtual time: the mean and the largest sample.
	PrefillQueueMean float64 `json:"prefill_queue_mean"`
	PrefillQueueMax  int     `json:"prefill_queue_max"`
	// PlacerAnswersLost counts the placer's answers lost on their way back
	// (Config.PlacerAnswerLoss), and PlacedAlone the cold requests decided
	// alone for want of an answer: at the timeout, or at once while the
	// placer was quiet after one.
	PlacerAnswersLost int `json:"placer_answers_lost,omitempty"`
	PlacedAlone       int `json:"placed_alone,omitempty"`
	// GossipPacketsLost counts packet copies the network dropped.
	GossipPacketsLost uint64 `json:"gossip_packets_lost,omitempty"`
	// GossipFactsLearned counts ownership facts the replicas learned from
	// each other, all replicas together.
	GossipFactsLearned uint64 `json:"gossip_facts_learned,omitempty"`
	// GossipFactsDropped counts ownership facts pushed out of a replica's
	// full digest queue before they were sent (digest bandwidth is capped).
	GossipFactsDropped uint64 `json:"gossip_facts_dropped,omitempty"`

	// OutputTokens is the tokens the completed requests' clients got,
	// every piece of a resumed stream together: with nothing lost, the
	// sum of their max tokens.
	OutputTokens int64 `json:"output_tokens"`
	// Killed counts the workers Config.Kills killed before the run ended,
	// and Cuts the times a dying engine held a request (one request may be
	// cut more than once).
	Killed int `json:"killed,omitempty"`
	Cuts   int `json:"cuts,omitempty"`
	// Retried counts the attempts made again after a cut before the first
	// token (of a request or of a continuation), Resumed the continuations
	// that streamed after a cut past the first token, and CutFailed the
	// cut requests that failed (counted in Errors too): the migration
	// limit reached, no worker left, or the attempts run out.
	Retried   int `json:"retried,omitempty"`
	Resumed   int `json:"resumed,omitempty"`
	CutFailed int `json:"cut_failed,omitempty"`
	// ResumePauseMeanMs, ResumePauseP99Ms and ResumePauseMaxMs are how
	// long resumed streams paused, from the cut to the continuation's
	// first token, in milliseconds: the router's
	// vllm_router_stream_migration_seconds.
	ResumePauseMeanMs float64 `json:"resume_pause_mean_ms,omitempty"`
	ResumePauseP99Ms  float64 `json:"resume_pause_p99_ms,omitempty"`
	ResumePauseMaxMs  float64 `json:"resume_pause_max_ms,omitempty"`
}

// collector gathers what happens to requests during a run.
type collector struct {
	// turns holds every first token's TTFT and its request's wait at the
	// door (0 without one); doorWaits, with a door, every request's wait
	// at it, refused ones too.
	turns           []turn
	doorWaits       []time.Duration
	completed, errs int
	routed, hits    int
	rollouts        int
	shed            int
	// cutStats are counted as Result's Killed, Cuts, Retried, CutFailed
	// and resume pauses.
	cutStats

	first, last      time.Duration
	started, stopped bool
}

// cutStats counts what the deaths of workers did to requests, and the
// tokens the completed requests' clients got.
type cutStats struct {
	killed, cuts, retried, cutFailed int
	pauses                           []time.Duration
	outputTokens                     int64
}

// resumed counts a continuation's first token, pause after its cut.
func (c *cutStats) resumed(pause time.Duration) { c.pauses = append(c.pauses, pause) }

// summary fills the figures of the cuts in r.
func (c *cutStats) summary(r *Result) {
	r.OutputTokens, r.Killed, r.Cuts = c.outputTokens, c.killed, c.cuts
	r.Retried, r.Resumed, r.CutFailed = c.retried, len(c.pauses), c.cutFailed
	slices.Sort(c.pauses)
	r.ResumePauseMeanMs, r.ResumePauseP99Ms = mean(c.pauses), quantile(c.pauses, 0.99)
	r.ResumePauseMaxMs = quantile(c.pauses, 1)
}

// turn is one request's TTFT and its wait at the door within it.
type turn struct{ ttft, door time.Duration }

// firstToken counts a request's first token.
func (c *collector) firstToken(ttft, door time.Duration) {
	c.turns = append(c.turns, turn{ttft, door})
}

// slowest is the mean TTFT of the slowest 1% of requests (at least one),
// split into the wait at the door and the rest, in ms.
func (c *collector) slowest() (door, after float64) {
	slow := slices.SortedFunc(slices.Values(c.turns), func(a, b turn) int { return cmp.Compare(b.ttft, a.ttft) })
	slow = slow[:min(max(len(slow)/100, 1), len(slow))]
	var d, all time.Duration
	for _, f := range slow {
		d, all = d+f.door, all+f.ttft
	}
	n := float64(max(len(slow), 1))
	return ms(d) / n, ms(all-d) / n
}

// route counts one decision of the (prefill) router.
func (c *collector) route(d affinity.Decision) {
	c.routed++
	if d.Hit {
		c.hits++
	}
	if d.Shed {
		c.shed++
	}
}

func (c *collector) arrived(at time.Duration) {
	if !c.started {
		c.first, c.started = at, true
	}
}

func (c *collector) finished(at time.Duration) {
	c.last = max(c.last, at)
	c.stopped = true
}

func (c *collector) makespan() time.Duration {
	if !c.stopped {
		return 0
	}
	return c.last - c.first
}

// quantile returns the q-quantile (nearest rank) of sorted durations, in ms.
func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return ms(sorted[min(max(rank, 0), len(sorted)-1)])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mean(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var sum float64
	for _, d := range ds {
		sum += ms(d)
	}
	return sum / float64(len(ds))
}

// hitRate is cached over prompt tokens of workers.
func hitRate(workers []*worker) float64 {
	var prompt, cached int64
	for _, w := range workers {
		prompt += w.promptTokens
		cached += w.cachedTokens
	}
	return ratio(float64(cached), float64(prompt))
}

// busyCV is the coefficient of variation of workers' busy time.
func busyCV(workers []*worker) float64 {
	if len(workers) == 0 {
		return 0
	}
	var sum float64
	for _, w := range workers {
		sum += w.busy.Seconds()
	}
	avg := sum / float64(len(workers))
	var sq float64
	for _, w := range workers {
		d := w.busy.Seconds() - avg
		sq += d * d
	}
	return ratio(math.Sqrt(sq/float64(len(workers))), avg)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// summary fills the request-side figures of r.
func (c *collector) summary(r *Result) {
	ttfts := make([]time.Duration, 0, len(c.turns))
	for _, t := range c.turns {
		ttfts = append(ttfts, t.ttft)
	}
	slices.Sort(ttfts)
	r.Requests, r.Errors, r.Shed = c.completed, c.errs, c.shed
	r.TTFTP50Ms, r.TTFTP99Ms, r.TTFTMeanMs = quantile(ttfts, 0.5), quantile(ttfts, 0.99), mean(ttfts)
	slices.Sort(c.doorWaits)
	r.DoorWaitP99Ms, r.DoorWaitMeanMs = quantile(c.doorWaits, 0.99), mean(c.doorWaits)
	if len(c.doorWaits) > 0 {
		r.SlowestAtDoorMs, r.SlowestAfterDoorMs = c.slowest()
	}
	r.RouterHitRate = ratio(float64(c.hits), float64(c.routed))
	c.cutStats.summary(r)
	span := c.makespan().Seconds()
	r.MakespanSeconds = span
	r.ThroughputRPS = ratio(float64(c.completed), span)
}

// result summarises the run.
func (s *simulation) result() Result {
	routed := s.workers[:s.cfg.routedWorkers()]
	r := Result{
		Policy: s.cfg.PolicyLabel(), Replicas: s.cfg.Replicas, Sync: s.cfg.Sync,
		Workers: s.cfg.totalWorkers(), HitRate: hitRate(routed), LoadCV: busyCV(routed),
	}
	s.stats.summary(&r)
	r.OracleHitRate = ratio(float64(s.oracle.hits), float64(s.stats.routed))
	r.Lost, r.FalseHits = s.oracle.lost, s.oracle.falseHits
	r.Judged = judged(s.replicas)
	var routedComputed uint64
	for i, w := range s.workers {
		r.PrefillTokens += w.engine.ComputedTokens()
		if i < len(routed) {
			routedComputed += w.engine.ComputedTokens()
		}
	}
	r.Rollouts = s.stats.rollouts
	r.PromptTokensPerRollout = ratio(float64(routedComputed), float64(r.Rollouts))
	r.RolloutsPerMin = ratio(float64(r.Rollouts), r.MakespanSeconds/60)
	r.PrefillQueueMean, r.PrefillQueueMax = s.queues.mean(), s.queues.max
	r.GossipBytesPerSec = ratio(float64(s.net.bytesSent), r.MakespanSeconds)
	r.GossipPacketsLost = s.net.packetsLost
	r.PlacerAnswersLost, r.PlacedAlone = s.placing.answersLost, s.placing.alone
	for _, rep := range s.replicas {
		if rep.gossip != nil {
			st := rep.gossip.Stats()
			r.GossipFactsLearned += st.FactsLearned
			r.GossipFactsDropped += st.FactsDropped
		}
	}
	if s.cfg.Disaggregated() {
		decode := s.workers[s.cfg.routedWorkers():]
		r.PD = strconv.Itoa(s.cfg.Prefill) + ":" + strconv.Itoa(s.cfg.Decode)
		r.DecodeHitRate, r.DecodeLoadCV = hitRate(decode), busyCV(decode)
	}
	return r
}
