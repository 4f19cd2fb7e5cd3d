package health

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Recovery probes: while a verdict holds a worker's circuit open, the monitor
// keeps one small generation (POST /v1/completions, max_tokens 1) going to it.
// Against a wedged worker the probe waits in the engine's queue, so it answers
// the moment the engine moves again and the circuit closes then, instead of a
// fixed CBTimeout later. Against a degraded worker the same probe goes at once
// to a healthy peer of its group, and the worker is let back (half-open, so
// that real trials judge its rate) only when its answer is no longer far
// slower than the peer's.

const (
	// recoveryBase and recoveryCeiling bound the wait after a failed or slow
	// recovery probe: it doubles from the base up to the ceiling.
	recoveryBase    = time.Second
	recoveryCeiling = 30 * time.Second
	// recoverySlack is the latency difference below which a probe is never
	// slow against its peer's, whatever the ratio: timing noise.
	recoverySlack = 10 * time.Millisecond
	// recoveryPrompt is what a recovery probe asks the engine to continue.
	recoveryPrompt = "ping"
)

// errProbeRefused: the worker answered the recovery probe with a client error
// (the engine does not serve /v1/completions, or not that model, or wants
// credentials we lack). Recovery then falls back to CBTimeout and trials.
var errProbeRefused = errors.New("recovery probe refused")

// errProbeTimedOut: the recovery probe waited out its whole bound without an
// answer, as one does in a wedged engine's queue.
var errProbeTimedOut = errors.New("no answer within the probe's bound")

// recovery is the state of the probes that bring a worker back from a
// verdict. Guarded by the worker's mutex.
type recovery struct {
	open    bool    // the circuit was opened by a verdict: a good probe closes it
	next    backoff // when the next probe is due
	refused bool    // the worker refused the probe: fall back to CBTimeout
}

// generate sends one recovery probe to t and returns how long the answer took,
// in real time: it measures the worker, not the Monitor's clock. A 2xx is an
// answer; a 4xx other than 408 and 429 wraps errProbeRefused.
func (p workerClient) generate(ctx context.Context, t probeTarget, model string, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var dial ctxDialer
	defer dial.release()
	hc := p.client(ctx, t, &dial, timeout)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(t.generate)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if p.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.apiKey)
	}
	req.SetBody(recoveryBody(model))
	req.SetConnectionClose()
	start := time.Now()
	if err := hc.DoTimeout(req, resp, timeout); err != nil {
		if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// Either timer may fire first: fasthttp's, or ctx's, which
			// closes the connection under the read.
			return 0, fmt.Errorf("recovery probe: %w: %w", errProbeTimedOut, err)
		}
		return 0, fmt.Errorf("recovery probe: %w", err)
	}
	took := time.Since(start)
	switch code := resp.StatusCode(); {
	case code >= 200 && code <= 299:
		return took, nil
	case code >= 400 && code <= 499 && code != 408 && code != 429:
		return 0, fmt.Errorf("%w: status %d", errProbeRefused, code)
	default:
		return 0, fmt.Errorf("recovery probe: status %d", code)
	}
}

// recoveryBody is the one-token, deterministic, non-streamed completion a
// recovery probe sends.
func recoveryBody(model string) []byte {
	b := []byte(`{"prompt":"` + recoveryPrompt + `","max_tokens":1,"temperature":0,"stream":false`)
	if model != "" {
		b = append(b, `,"model":`...)
		b = strconv.AppendQuote(b, model)
	}
	return append(b, '}')
}

// needsRecovery reports whether Tick should send w a recovery probe. Caller
// holds mu.
func (w *worker) needsRecovery(now int64) bool {
	r := &w.recovery
	return r.open && !r.refused && stateOf(w.breaker.word()) != CircuitClosed &&
		r.next.due(now) && !w.generating.Load()
}

// tripByVerdict opens the circuit for a verdict, and marks it as one that a
// recovery probe may close. Caller holds mu.
func (w *worker) tripByVerdict(now int64) change {
	w.recovery.open = true
	if w.breaker.trip(now) {
		return changeCircuit
	}
	return 0
}

// renewDegraded sets the degrade verdict again, for a trial that proved the
// worker still slow. Caller holds mu.
func (w *worker) renewDegraded(now int64) change {
	ch := setVerdict(&w.degradedAt, true, now) | w.tripByVerdict(now)
	w.recovery.next.failed(now, recoveryBase.Nanoseconds(), recoveryCeiling.Nanoseconds())
	w.publishCircuit()
	return ch
}

// probeResult is what one recovery probe found.
type probeResult struct {
	err  error
	slow bool // degraded worker only: far slower than its peer
}

// recoverOne sends w a recovery probe (and, if w is degraded, the same probe
// to a healthy peer the judge names) and hands the answer to the judge.
func (p *prober) recoverOne(ctx context.Context, w *worker) {
	w.wantGenerate.Store(false)
	var peer *worker
	if w.degradedAt.Load() != notSet {
		peer = p.judge.peerOf(w)
	}
	start := p.now()
	took, peerTook, err := p.probePair(ctx, w, peer)
	if ctx.Err() != nil {
		return
	}
	res := p.judge.recoveryResult(took, peerTook, err)
	if ch := p.judge.recovered(w, start, p.now(), res); res.err != nil && ch == 0 {
		p.log.Debug("recovery probe failed", "worker", w.id, "url", w.url, "err", res.err)
	}
}

// probePair probes w, and peer at the same time when there is one. peerTook
// is -1 unless peer answered.
func (p *prober) probePair(ctx context.Context, w, peer *worker) (took, peerTook time.Duration, err error) {
	timeout := p.cfg.WedgeTimeout
	peerTook = -1
	var wg sync.WaitGroup
	if peer != nil {
		wg.Go(func() {
			if d, err := p.client.generate(ctx, peer.target, peer.model, timeout); err == nil {
				peerTook = d
			}
		})
	}
	took, err = p.client.generate(ctx, w.target, w.model, timeout)
	wg.Wait()
	return took, peerTook, err
}

// recoveryResult judges a recovery probe that took took (or failed with
// err) against the same probe to a peer that took peerTook (-1: no peer
// answered).
func (j *judge) recoveryResult(took, peerTook time.Duration, err error) probeResult {
	if err != nil || peerTook < 0 {
		return probeResult{err: err}
	}
	return probeResult{slow: j.degrade.tooSlowProbe(took, peerTook)}
}

// recovered applies the answer of a recovery probe of w sent at start and
// answered at now, and returns what it changed.
func (j *judge) recovered(w *worker, start, now int64, res probeResult) change {
	w.mu.Lock()
	var ch change
	if j.stalls.touched(start, now) {
		w.recovery.next.reset() // our stall, not the worker's: ask again
	} else {
		ch = j.applyRecovery(w, now, res)
	}
	w.publishCircuit()
	w.mu.Unlock()
	j.report(w, ch)
	return ch
}

// peerOf returns a worker of w's group that is eligible, to measure w's
// probe against, or nil.
func (j *judge) peerOf(w *worker) *worker {
	for _, p := range j.workers.Load().list {
		if p != w && p.group == w.group && p.eligible() && stateOf(p.circuit.Load()) == CircuitClosed {
			return p
		}
	}
	return nil
}

// applyRecovery applies a recovery probe's answer. An answer is progress and
// lifts the wedge verdict; an answer at a normal speed lifts the degrade
// verdict. A worker no verdict holds any more closes its circuit, or
// half-opens it if it was degraded, so that real trials judge its rate.
// Caller holds mu.
func (j *judge) applyRecovery(w *worker, now int64, res probeResult) change {
	base, ceiling := recoveryBase.Nanoseconds(), recoveryCeiling.Nanoseconds()
	switch {
	case errors.Is(res.err, errProbeRefused):
		w.recovery.refused = true
		j.log.Warn("worker refuses recovery probes; its circuit recovers after --cb-timeout-duration-secs",
			"worker", w.id, "url", w.url, "err", res.err)
		return 0
	case errors.Is(res.err, errProbeTimedOut):
		// It waited its whole bound in the engine's queue: the worker is
		// still wedged, and the next probe goes at once, so that one is
		// always waiting when the engine moves again. Backing off here
		// left the worker out for up to the ceiling after it recovered.
		w.recovery.next.reset()
		return 0
	case res.err != nil:
		w.recovery.next.failed(now, base, ceiling)
		return 0
	}
	w.noteHeard(now)
	ch := setVerdict(&w.wedgedAt, false, now)
	wasDegraded := w.degradedAt.Load() != notSet
	if wasDegraded && res.slow {
		w.recovery.next.failed(now, base, ceiling)
		return ch
	}
	ch |= setVerdict(&w.degradedAt, false, now)
	w.recovery.next.reset()
	w.recovery.open = false
	if wasDegraded {
		return ch | circuitMoved(w.breaker.halfOpen(now))
	}
	return ch | circuitMoved(w.breaker.close(now))
}

func circuitMoved(moved bool) change {
	if moved {
		return changeCircuit
	}
	return 0
}
