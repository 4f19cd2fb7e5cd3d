package requestlog

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"time"
)

// Entry is what the line of one finished request is written from: the
// request as its client saw it, and its Route.
type Entry struct {
	ID        []byte
	Path      string // the endpoint's path, the line's route
	Model     string
	Status    int
	ErrType   string // empty when it succeeded
	Start     time.Time
	Routed    time.Time // when its first worker was chosen; zero when none was
	FirstByte time.Time // when a stream's first bytes went out; zero for a whole answer
	Route     *Route
}

// Write writes e's line on log, at INFO; nothing when INFO is off.
func Write(log *slog.Logger, e *Entry) {
	if !log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	rt := e.Route
	attrs := []slog.Attr{slog.String("request_id", string(e.ID)), slog.String("route", e.Path),
		slog.String("model", e.Model), slog.Int("status", e.Status),
		slog.Float64("duration_ms", ms(time.Since(e.Start))), slog.Int("attempts", rt.Attempts)}
	if rt.Decided {
		d := rt.Decision
		attrs = append(attrs, slog.String("decision", DecisionName(d)), slog.Float64("matched", share(d.Matched, d.Total)))
		if rt.Judged {
			attrs = append(attrs, slog.String("fact", rt.Fact.String()), slog.String("via", rt.Via.String()))
		}
	}
	if rt.Worker != 0 {
		attrs = append(attrs, slog.Uint64("worker", uint64(rt.Worker)))
	}
	if len(rt.Streamed) > 1 {
		attrs = append(attrs, slog.String("workers", rt.streamedWorkers()), slog.Int("migrations", len(rt.Streamed)-1))
	}
	if rt.Preempted > 0 {
		attrs = append(attrs, slog.Int("preemptions", rt.Preempted))
	}
	if rt.Prefill != 0 {
		attrs = append(attrs, slog.Uint64("prefill_worker", uint64(rt.Prefill)))
	}
	if !e.Routed.IsZero() {
		attrs = append(attrs, slog.Float64("routing_ms", ms(e.Routed.Sub(e.Start))))
	}
	if !e.FirstByte.IsZero() {
		attrs = append(attrs, slog.Float64("ttft_ms", ms(e.FirstByte.Sub(e.Start))))
	}
	if rt.Tokens > 0 {
		attrs = append(attrs, slog.Int("tokens", rt.Tokens))
	}
	if u := rt.Usage; u.PromptTokens > 0 {
		attrs = append(attrs, slog.Int("prompt_tokens", u.PromptTokens))
		if u.HasCached {
			attrs = append(attrs, slog.Int("cached_tokens", u.CachedTokens))
		}
	}
	if e.ErrType != "" {
		attrs = append(attrs, slog.String("error_type", e.ErrType))
	}
	log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

func share(part, whole int) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(min(part, whole)) / float64(whole)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// CompletionTokens reads usage.completion_tokens (or output_tokens) from
// a whole answer, without parsing it.
func CompletionTokens(body []byte) int {
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
