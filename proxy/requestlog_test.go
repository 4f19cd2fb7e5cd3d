package proxy

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/logsink"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

func TestEveryRequestHasOneLogLine(t *testing.T) {
	bad, good := startFake(t, "bad"), startFake(t, "good")
	bad.Set(fakeworker.Sequence(fakeworker.Status(503, induced), fakeworker.Stream(3)))
	good.Set(fakeworker.Stream(3))
	var sink logsink.Sink
	ws := []Worker{{ID: 1, URL: bad.URL, Role: RoleRegular}, {ID: 2, URL: good.URL, Role: RoleRegular}}
	p, err := buildProxyLogged(Config{Retry: Retry{InitialBackoff: time.Millisecond}}, "", affinity.PolicyCacheAware, ws, nil,
		slog.New(slog.NewJSONHandler(&sink, nil)))
	if err != nil {
		t.Fatal(err)
	}
	url := serveProxy(t, p)
	prompt := strings.Repeat("a long shared system prompt. ", 20)
	readStream(t, url, completion(prompt, true))
	readStream(t, url, completion(prompt+"and a follow-up", true))
	post(t, url, "/v1/completions", `{"prompt":"no model"}`)
	var lines []map[string]any
	testwait.Eventually(t, waitDeadline, func() bool { lines = sink.Messages(t, "request"); return len(lines) == 3 }, "three request lines")
	first, second, refused := lines[0], lines[1], lines[2]
	if first["attempts"] != 2.0 || first["worker"] != 2.0 || first["decision"] != "miss" || first["status"] != 200.0 ||
		first["tokens"] != 3.0 || first["ttft_ms"] == nil || first["request_id"] == "" || first["model"] != "m" {
		t.Fatalf("first line %v", first)
	}
	if second["decision"] != "hit" || second["attempts"] != 1.0 || second["matched"].(float64) < 0.9 {
		t.Fatalf("second line %v", second)
	}
	if refused["status"] != 400.0 || refused["error_type"] != "bad_request" || refused["attempts"] != 0.0 {
		t.Fatalf("refused line %v", refused)
	}
}

// TestTheRequestLogSaysThePromptsTokensAndHowManyTheEngineFoundCached: a
// whole answer's usage and a stream's final usage chunk give the line the
// prompt's tokens and the cached ones; an answer without usage gives
// neither.
func TestTheRequestLogSaysThePromptsTokensAndHowManyTheEngineFoundCached(t *testing.T) {
	w := startFake(t, "w")
	const usage = `"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}`
	w.Set(func(e *fakeworker.Exchange) {
		switch {
		case e.Wants(`"stream":true`):
			if e.StartStream() == nil && e.Event(`{"choices":[{"text":"a"}]}`) == nil &&
				e.Event(`{"choices":[],`+usage+`}`) == nil {
				_ = e.EndStream()
			}
		case e.Wants("no usage"):
			e.JSON(200, `{"choices":[{"text":"ok"}]}`)
		default:
			e.JSON(200, `{"choices":[{"text":"ok"}],`+usage+`}`)
		}
	})
	var sink logsink.Sink
	p, err := buildProxyLogged(Config{}, "", affinity.PolicyCacheAware, []Worker{{ID: 1, URL: w.URL, Role: RoleRegular}}, nil,
		slog.New(slog.NewJSONHandler(&sink, nil)))
	if err != nil {
		t.Fatal(err)
	}
	url := serveProxy(t, p)
	post(t, url, "/v1/completions", completion("a whole answer", false))
	readStream(t, url, completion("a stream", true))
	post(t, url, "/v1/completions", completion("no usage", false))
	var lines []map[string]any
	testwait.Eventually(t, waitDeadline, func() bool { lines = sink.Messages(t, "request"); return len(lines) == 3 }, "three request lines")
	for i, l := range lines[:2] {
		if l["prompt_tokens"] != 40.0 || l["cached_tokens"] != 32.0 {
			t.Errorf("line %d: prompt_tokens %v, cached_tokens %v; want 40 and 32", i+1, l["prompt_tokens"], l["cached_tokens"])
		}
	}
	if _, ok := lines[2]["prompt_tokens"]; ok {
		t.Errorf("an answer without usage logged prompt_tokens: %v", lines[2])
	}
}
