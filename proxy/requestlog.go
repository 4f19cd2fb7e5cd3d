package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
)

// The request log: one structured line per request, at INFO on the
// replica's logger (JSON with --log-json), for operators who follow one
// request: its id, model, how it was routed, where it went, how long its
// first token and the whole took, and how it ended.

// route is what the request log says of a request's routing: the decision
// of its final leg's first attempt, and every attempt of every leg.
type route struct {
	decision affinity.Decision
	decided  bool
	// fact and via are what the replica knew of the prefix and who chose
	// the worker, when judged says the decider routed it on the prefix.
	fact     core.Fact
	via      core.Via
	judged   bool
	attempts int
	worker   affinity.WorkerID // the worker whose answer the client got
	prefill  affinity.WorkerID // the prefill worker of a disaggregated request
	tokens   int               // generated tokens, as the answer or the stream said
	counters *workerCounters   // worker's, for its tally; nil without metrics
	// streamed are the workers a stream that may resume used, in order
	// (migrate.go); more than one when it resumed.
	streamed []affinity.WorkerID
	// tookBack: the exchange asked a borrower to give way (preempt.go);
	// preempted: the times its stream gave way.
	tookBack  bool
	preempted int
}

// noteAttempt records an attempt of leg l on dec's worker, whose counters
// are c.
func (x *exchange) noteAttempt(l *leg, dec affinity.Decision, c *workerCounters) {
	x.route.attempts++
	if l.phase == RolePrefill {
		x.route.prefill = dec.Worker
		return
	}
	if !x.route.decided && !l.pinned {
		x.route.decision, x.route.decided = dec, true
		x.route.fact, x.route.via, x.route.judged = l.decided.Fact, l.decided.Via, l.decided.Routed()
	}
	x.route.worker, x.route.counters = dec.Worker, c
}

// logRequest writes x's line.
func (rec *recorder) logRequest(x *exchange, status int, errType string) {
	if !rec.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{slog.String("request_id", string(x.id)), slog.String("route", x.ep.Path),
		slog.String("model", x.in.Model), slog.Int("status", status),
		slog.Float64("duration_ms", ms(time.Since(x.start))), slog.Int("attempts", x.route.attempts)}
	if x.route.decided {
		d := x.route.decision
		attrs = append(attrs, slog.String("decision", decisionName(d)), slog.Float64("matched", share(d.Matched, d.Total)))
		if x.route.judged {
			attrs = append(attrs, slog.String("fact", x.route.fact.String()), slog.String("via", x.route.via.String()))
		}
	}
	if x.route.worker != 0 {
		attrs = append(attrs, slog.Uint64("worker", uint64(x.route.worker)))
	}
	if len(x.route.streamed) > 1 {
		attrs = append(attrs, slog.String("workers", x.route.streamedWorkers()), slog.Int("migrations", len(x.route.streamed)-1))
	}
	if x.route.preempted > 0 {
		attrs = append(attrs, slog.Int("preemptions", x.route.preempted))
	}
	if x.route.prefill != 0 {
		attrs = append(attrs, slog.Uint64("prefill_worker", uint64(x.route.prefill)))
	}
	if !x.routed.IsZero() {
		attrs = append(attrs, slog.Float64("routing_ms", ms(x.routed.Sub(x.start))))
	}
	if !x.firstByte.IsZero() {
		attrs = append(attrs, slog.Float64("ttft_ms", ms(x.firstByte.Sub(x.start))))
	}
	if x.route.tokens > 0 {
		attrs = append(attrs, slog.Int("tokens", x.route.tokens))
	}
	if errType != "" {
		attrs = append(attrs, slog.String("error_type", errType))
	}
	rec.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

func decisionName(d affinity.Decision) string {
	switch {
	case d.Hit:
		return "hit"
	case d.Shed:
		return "shed"
	}
	return "miss"
}

func share(part, whole int) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(min(part, whole)) / float64(whole)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// completionTokens reads usage.completion_tokens (or output_tokens) from
// a whole answer, without parsing it.
func completionTokens(body []byte) int {
	for _, key := range [][]byte{[]byte(`"completion_tokens":`), []byte(`"output_tokens":`)} {
		i := bytes.LastIndex(body, key)
		if i < 0 {
			continue
		}
		rest := bytes.TrimLeft(body[i+len(key):], " ")
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		if n, err := strconv.Atoi(string(rest[:end])); err == nil {
			return n
		}
	}
	return 0
}
