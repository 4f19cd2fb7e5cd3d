package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// TestWithEnginePriorityTheClassReachesTheEngineAsItsPriority: on every
// route whose body an engine reads a priority from, the class rank is the
// body's priority field at the worker (0 the highest, as vLLM reads it),
// whatever priority the client sent: on embeddings, rerank, responses and
// generate the client's own used to pass. A replica without
// --engine-priority passes the body unchanged.
func TestWithEnginePriorityTheClassReachesTheEngineAsItsPriority(t *testing.T) {
	w := startFake(t, "w1")
	bodies := make(chan string, 8)
	w.Set(func(e *fakeworker.Exchange) {
		bodies <- string(e.Body)
		fakeworker.Default()(e)
	})
	send := func(r *testRouter, path, body, class string) string {
		req, _ := http.NewRequest(http.MethodPost, r.url+path, strings.NewReader(body))
		req.Header.Set("x-priority", class)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return <-bodies
	}
	cfg := classesConfig()
	cfg.Admission.EnginePriority = true
	r := startRouter(t, cfg, w)
	for _, c := range []struct{ path, body, class, want string }{
		{"/v1/completions", `{"model":"m","prompt":"hi"}`, "interactive", `"priority":1`},
		{"/v1/completions", `{"model":"m","prompt":"hi","priority":-7}`, "bulk", `"priority":3`},
		{"/v1/completions", ` {"model":"m","prompt":"hi"}`, "system", `"priority":0`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"priority":-7}`, "bulk", `"priority":3`},
		{"/v1/embeddings", `{"model":"m","input":"hi","priority":-100}`, "bulk", `"priority":3`},
		{"/v1/rerank", `{"model":"m","query":"q","documents":["d"],"priority":-100}`, "bulk", `"priority":3`},
		{"/rerank", `{"model":"m","query":"q","documents":["d"],"priority":-100}`, "bulk", `"priority":3`},
		{"/v1/responses", `{"model":"m","input":"hi","priority":-100}`, "bulk", `"priority":3`},
		{"/generate", `{"text":"hi","priority":-100}`, "bulk", `"priority":3`},
	} {
		got := send(r, c.path, c.body, c.class)
		if !strings.Contains(got, c.want) || strings.Count(got, `"priority"`) != 1 {
			t.Errorf("%s %s as %s reached the worker as %s; want one %s", c.path, c.body, c.class, got, c.want)
		}
	}
	plain := startRouter(t, classesConfig(), w)
	if got := send(plain, "/v1/completions", `{"model":"m","prompt":"hi"}`, "bulk"); strings.Contains(got, "priority") {
		t.Errorf("without --engine-priority the body changed: %s", got)
	}
}

// Every endpoint with a body says whether an engine reads a priority from
// it: a route added without deciding (the Anthropic Messages route, say)
// fails here rather than passing a client's priority on unseen.
func TestEveryRouteWithABodyDecidesOnEnginePriority(t *testing.T) {
	for _, ep := range wire.Endpoints {
		if _, decided := enginePriority[ep]; ep.Kind != wire.KindNone && !decided {
			t.Errorf("%s: add it to enginePriority, true if an engine reads a priority from its body", ep.Path)
		}
	}
}

func TestWithPriorityWritesOneValidField(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:                                 `{"priority":2}`,
		` { }`:                               ` {"priority":2 }`,
		`{"a":1}`:                            `{"priority":2,"a":1}`,
		`{"priority":-1,"a":1}`:              `{"a":1,"priority":2}`,
		`{"priority":-1,"pri\u006frity":-2}`: `{"priority":2}`,
	} {
		got, ok := withPriority([]byte(in), 2)
		if !ok || string(got) != want {
			t.Errorf("withPriority(%s) = %s, %v; want %s", in, got, ok, want)
		}
	}
	for _, in := range []string{`[1]`, ``, `{"priority":`, `"priority"`} {
		if _, ok := withPriority([]byte(in), 2); ok {
			t.Errorf("withPriority(%q) took a body that is not a JSON object", in)
		}
	}
}

// FuzzWithPriority: whatever a client sends, a body withPriority takes
// comes out a JSON object with one priority, the rank, and every other
// field of a valid object as it was.
func FuzzWithPriority(f *testing.F) {
	for _, s := range []string{`{}`, ` {"a":1}`, `{"priority":"x","b":[1,{"priority":2}]}`, `{"a":"\"priority\""}`, `[`, `{`,
		`{"pri\u006frity":-9}`, `{"priority":-1,"priority":-2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, ok := withPriority(body, 3)
		if !ok {
			return
		}
		var in, got map[string]any
		inValid := json.Unmarshal(body, &in) == nil && in != nil
		if err := json.Unmarshal(out, &got); err != nil {
			if inValid {
				t.Fatalf("%q became %q, not JSON: %v", body, out, err)
			}
			return // a malformed body stays malformed, for the route's 400
		}
		if got["priority"] != float64(3) {
			t.Fatalf("%q became %q: priority %v", body, out, got["priority"])
		}
		if inValid {
			in["priority"] = float64(3)
			if a, b := fmt.Sprint(in), fmt.Sprint(got); a != b {
				t.Fatalf("%q became %q: fields changed", body, out)
			}
		}
	})
}
