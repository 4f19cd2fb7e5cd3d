package health

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// rateWindowSize bounds the token-rate samples kept per worker; past it the
// oldest sample is overwritten, so a busy worker is judged on its latest
// requests.
const rateWindowSize = 128

// minRateTokens is the number of tokens a request must deliver after its first
// byte to yield a rate sample: fewer make the rate mostly timing noise (a
// prefill-only request with max_tokens=1 yields none).
const minRateTokens = 4

// rateSample is one request's decode rate in tokens per second, over the
// whole request or over one slice of it (see degradeJudge.slice).
type rateSample struct {
	at   int64 // when the request ended
	rate float64
}

// rateWindow is a ring of the latest rate samples of one worker. Not safe for
// concurrent use: the worker's mutex guards it.
type rateWindow struct {
	buf  [rateWindowSize]rateSample
	n    int // valid samples
	next int // slot of the next write
}

func (r *rateWindow) add(at int64, rate float64) {
	r.buf[r.next] = rateSample{at: at, rate: rate}
	r.next = (r.next + 1) % rateWindowSize
	r.n = min(r.n+1, rateWindowSize)
}

// median returns the median rate of the samples taken at or after since, and
// how many there are (0: none, and the median is NaN). scratch is reused to
// avoid allocating.
func (r *rateWindow) median(since int64, scratch []float64) (float64, int, []float64) {
	scratch = scratch[:0]
	for i := range r.n {
		if s := r.buf[i]; s.at >= since {
			scratch = append(scratch, s.rate)
		}
	}
	slices.Sort(scratch)
	return medianExcluding(scratch, -1), len(scratch), scratch
}

// medianExcluding returns the median of sorted without the element at index
// skip (skip < 0 keeps all), or NaN when nothing is left. It runs in O(1), so
// every worker can be compared with all its peers but itself in one pass.
func medianExcluding(sorted []float64, skip int) float64 {
	n := len(sorted)
	if skip >= 0 {
		n--
	}
	if n <= 0 {
		return math.NaN()
	}
	at := func(k int) float64 {
		if skip >= 0 && k >= skip {
			return sorted[k+1]
		}
		return sorted[k]
	}
	if n%2 == 1 {
		return at(n / 2)
	}
	return (at(n/2-1) + at(n/2)) / 2
}

// judged is one worker's median rate within a degrade evaluation.
type judged struct {
	index   int // position in the worker list
	rate    float64
	samples int // within DegradeWindow
	ok      bool
}

// rateJudgement is a worker's standing in a degrade evaluation.
type rateJudgement struct {
	slow    bool // judged on DegradeMinSamples and too slow: degraded
	suspect bool // too slow on fewer samples: evidence, short of a verdict
}

// degradeJudge is the degrade verdict: it samples the workers' decode rates
// (slices of the streams in flight, and the rest of each when it ends),
// ranks each worker against the peers of its group, and sets and lifts the
// verdict. A sample that overlapped a stall of this replica (stalls) is
// dropped.
type degradeJudge struct {
	cfg    Config
	stalls *stallLog
}

// rates decides, aligned with ws, which workers are degraded: judged on
// enough recent samples and slower than DegradeRatio times the median of the
// judged peers in their group. It also leaves each worker's peer median in
// peerRate for End to weigh trial requests against.
func (d *degradeJudge) rates(ws []*worker, now int64) []rateJudgement {
	since := now - d.cfg.DegradeWindow.Nanoseconds()
	groups := make(map[string][]judged)
	var scratch []float64
	for i, w := range ws {
		w.mu.Lock()
		rate, n, s := w.rates.median(since, scratch)
		w.mu.Unlock()
		scratch = s
		groups[w.group] = append(groups[w.group],
			judged{index: i, rate: rate, samples: n, ok: n > 0 && n >= d.cfg.DegradeMinSamples})
	}
	out := make([]rateJudgement, len(ws))
	for _, members := range groups {
		d.group(ws, members, out)
	}
	return out
}

func (d *degradeJudge) group(ws []*worker, members []judged, out []rateJudgement) {
	ranked := make([]judged, 0, len(members))
	for _, g := range members {
		if g.ok {
			ranked = append(ranked, g)
		}
	}
	slices.SortFunc(ranked, func(a, b judged) int { return cmp.Compare(a.rate, b.rate) })
	sorted := make([]float64, len(ranked))
	rank := make(map[int]int, len(ranked))
	for k, g := range ranked {
		sorted[k], rank[g.index] = g.rate, k
	}
	for _, g := range members {
		skip, mine := rank[g.index]
		if !mine {
			skip = -1
		}
		peers := medianExcluding(sorted, skip)
		ws[g.index].peerRate.Store(math.Float64bits(zeroIfNaN(peers)))
		slower := g.samples > 0 && !math.IsNaN(peers) && g.rate < d.cfg.DegradeRatio*peers
		out[g.index] = rateJudgement{slow: slower && g.ok, suspect: slower}
	}
}

// sliceMin is the shortest stretch of a stream that yields a rate sample;
// shorter ones are mostly timing noise.
func (d *degradeJudge) sliceMin() int64 { return d.cfg.EvalInterval.Nanoseconds() / 2 }

// slice samples the decode rate of a in flight over the stretch since its
// previous slice. Sampling streams while they run, not only when they end,
// is what lets a worker that slows down be caught within seconds: its
// requests take ever longer to end. A slice that overlapped a stall of this
// replica is dropped. Caller holds w.mu.
func (d *degradeJudge) slice(w *worker, a *Attempt, now int64) {
	first := a.firstAt.Load()
	if first == notSet {
		return // not decoding yet
	}
	if a.sliceAt == notSet {
		a.sliceAt, a.sliceTokens = first, a.firstTokens.Load()
	}
	if now-a.sliceAt < d.sliceMin() {
		return
	}
	tokens := a.tokens.Load()
	if !d.stalls.touched(a.sliceAt, now) {
		w.rates.add(now, perSecond(tokens-a.sliceTokens, now-a.sliceAt))
	}
	a.sliceAt, a.sliceTokens = now, tokens
}

// lastSample is the rate sample an attempt leaves when it ends: the rest of
// its stream since its last slice, or, for one too short to have been
// sliced, its whole decode rate. Caller holds w.mu.
func (d *degradeJudge) lastSample(w *worker, a *Attempt, now int64, rate float64, sampled bool) {
	switch {
	case a.sliceAt == notSet && sampled:
		w.rates.add(now, rate)
	case a.sliceAt != notSet && now-a.sliceAt >= d.sliceMin():
		w.rates.add(now, perSecond(a.tokens.Load()-a.sliceTokens, now-a.sliceAt))
	}
}

// verdict sets the degrade verdict of a worker whose rate is far below
// its peers'. Only a recovery probe at a normal speed lifts it (the worker
// gets no traffic to be measured on meanwhile), or, for a worker that refuses
// recovery probes, its samples ageing out of DegradeWindow. Caller holds mu.
func (d *degradeJudge) verdict(w *worker, now int64, slow bool) change {
	held := w.degradedAt.Load() != notSet
	switch {
	case !held && slow:
		w.recovery.next.failed(now, recoveryBase.Nanoseconds(), recoveryCeiling.Nanoseconds())
		return setVerdict(&w.degradedAt, true, now) | w.tripByVerdict(now)
	case held && !slow && w.recovery.refused:
		return setVerdict(&w.degradedAt, false, now)
	}
	return 0
}

func perSecond(tokens, ns int64) float64 { return float64(tokens) / (float64(ns) / 1e9) }

// tooSlow reports whether rate is degraded against w's peers as of the last Tick.
func (d *degradeJudge) tooSlow(w *worker, rate float64) bool {
	peers := math.Float64frombits(w.peerRate.Load())
	return peers > 0 && rate < d.cfg.DegradeRatio*peers
}

// tooSlowProbe reports whether a probe that took took is degraded against
// one to a peer that took peer: slower by more than 1/DegradeRatio, and by
// more than timing noise.
func (d *degradeJudge) tooSlowProbe(took, peer time.Duration) bool {
	return took-peer > recoverySlack && float64(took)*d.cfg.DegradeRatio > float64(peer)
}

func zeroIfNaN(f float64) float64 {
	if math.IsNaN(f) {
		return 0
	}
	return f
}
