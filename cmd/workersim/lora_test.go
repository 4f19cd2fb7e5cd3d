package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/kvevents"
)

// heardAs waits until the subscriber matches want blocks of tokens under identity.
func heardAs(t *testing.T, sub engineView, identity string, tokens []uint32, want int) {
	t.Helper()
	if !testwait.Holds(20*time.Second, func() bool { return sub.MatchedAs(identity, tokens) == want }) {
		t.Fatalf("the subscriber matches %d blocks under %q, want %d", sub.MatchedAs(identity, tokens), identity, want)
	}
}

// loraConfig is a worker serving sql-lora and chat-lora with one slot.
func loraConfig() serverConfig {
	cfg := testConfig()
	cfg.lora, cfg.engine.MaxLoras, cfg.engine.LoraSwapMs = true, 1, defaultLoRASwapMs
	cfg.loras = []loraModule{{Name: "sql-lora", Path: "/adapters/sql"}, {Name: "chat-lora", Path: "/adapters/chat"}}
	return cfg
}

// listed is what /v1/models lists: each id and its parent ("" for null).
func listed(t *testing.T, w *testWorker) map[string]string {
	t.Helper()
	_, _, body := w.get(pathModels)
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range list.Data {
		out[d.ID] = ""
		if d.Parent != nil {
			out[d.ID] = *d.Parent
		}
	}
	return out
}

func TestLoRAModulesAreReadAsVLLMWritesThem(t *testing.T) {
	got, err := parseLoRAModules([]string{`{"name":"sql-lora","path":"/a/sql"}`, "chat-lora=/a/chat"})
	if err != nil || !slices.Equal(got, []loraModule{{"sql-lora", "/a/sql"}, {"chat-lora", "/a/chat"}}) {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{`{"name":"x"}`, "x", `{"name":`} {
		if _, err := parseLoRAModules([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestAdaptersAreListedWithTheirParentAndLoadAtRunTime(t *testing.T) {
	w := startWorker(t, loraConfig())
	if got := listed(t, w); got["sql-lora"] != "sim-model" || got["chat-lora"] != "sim-model" || got["sim-model"] != "" {
		t.Fatalf("listed %v", got)
	}
	body := `{"model":"new-lora","prompt":"hi","max_tokens":1}`
	if status, _, _ := w.post(pathCompletions, body); status != 404 {
		t.Fatalf("an adapter not loaded: %d, want 404", status)
	}
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{pathLoadAdapter, `{"lora_name":"new-lora","lora_path":"/adapters/new"}`, 200},
		{pathLoadAdapter, `{"lora_name":"new-lora","lora_path":"/adapters/new"}`, 400}, // already loaded
		{pathLoadAdapter, `{"lora_name":"x"}`, 400},
		{pathUnloadAdapter, `{"lora_name":"nope"}`, 404},
	} {
		if status, _, got := w.post(c.path, c.body); status != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.path, c.body, status, got, c.status)
		}
	}
	if status, _, got := w.post(pathCompletions, body); status != 200 || listed(t, w)["new-lora"] != "sim-model" {
		t.Fatalf("a loaded adapter: %d %s", status, got)
	}
	if status, _, _ := w.post(pathUnloadAdapter, `{"lora_name":"new-lora"}`); status != 200 {
		t.Fatalf("unload: %d", status)
	}
	if status, _, _ := w.post(pathCompletions, body); status != 404 {
		t.Fatalf("an unloaded adapter: %d, want 404", status)
	}
}

// usageOf posts a completion of prompt for model salted with salt ("" none) and returns its
// prompt and cached tokens.
func usageOf(t *testing.T, w *testWorker, model, salt, prompt string) (int, int) {
	t.Helper()
	req := map[string]any{"model": model, "prompt": prompt, "max_tokens": 1}
	if salt != "" {
		req["cache_salt"] = salt
	}
	b, _ := json.Marshal(req)
	status, _, body := w.post(pathCompletions, string(b))
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	c := decode(t, body)
	return c.Usage.PromptTokens, c.Usage.PromptTokensDetails.CachedTokens
}

func TestSaltedAndAdapterPromptsAreCachedApartAndCountedHonestly(t *testing.T) {
	w := startWorker(t, loraConfig())
	prompt := longPrompt("shared", 4096)
	for _, step := range []struct {
		model, salt string
		cached      bool
	}{
		{"sim-model", "tenant-a", false},
		{"sim-model", "tenant-a", true},
		{"sim-model", "", false},
		{"sim-model", "tenant-b", false},
		{"sql-lora", "", false},
		{"sql-lora", "", true},
		{"chat-lora", "", false},
		{"sql-lora", "tenant-a", false},
	} {
		tokens, cached := usageOf(t, w, step.model, step.salt, prompt)
		if (cached > 0) != step.cached || cached >= tokens {
			t.Fatalf("%s salted %q: %d of %d tokens cached, want cached %v", step.model, step.salt, cached, tokens, step.cached)
		}
	}
	for _, salt := range []string{`""`, `5`, `{}`} {
		if status, _, body := w.post(pathCompletions, `{"prompt":"x","cache_salt":`+salt+`}`); status != 400 {
			t.Errorf("cache_salt %s: %d %s, want 400", salt, status, body)
		}
	}
}

func TestTheEngineReportsItsAdaptersAndCountsItsLoads(t *testing.T) {
	w := startWorker(t, loraConfig())
	info := func() string {
		_, _, body := w.get(pathMetrics)
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "vllm:lora_requests_info{") {
				return l[:strings.IndexByte(l, '}')+1]
			}
		}
		t.Fatalf("no vllm:lora_requests_info in\n%s", body)
		return ""
	}
	if got := info(); got != `vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""}` {
		t.Fatalf("idle: %s", got)
	}
	// Two adapters at once on one slot: one runs, the other waits for it.
	w.s.driver.SetWedged(true)
	var wg sync.WaitGroup
	for _, a := range []string{"sql-lora", "chat-lora"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.post(pathCompletions, fmt.Sprintf(`{"model":%q,"prompt":"hi","max_tokens":2}`, a))
		}()
	}
	waitFor(t, "both requests queued", func() bool {
		return w.metric(`vllm:num_requests_running{model_name="sim-model"}`)+w.metric(`vllm:num_requests_waiting{model_name="sim-model"}`) == 2
	})
	got := info()
	if !strings.Contains(got, `running_lora_adapters="sql-lora"`) && !strings.Contains(got, `running_lora_adapters="chat-lora"`) ||
		!strings.Contains(got, `waiting_lora_adapters="chat-lora"`) && !strings.Contains(got, `waiting_lora_adapters="sql-lora"`) {
		t.Fatalf("busy: %s, want one adapter running and the other waiting", got)
	}
	w.s.driver.SetWedged(false)
	wg.Wait()
	if n := w.metric("workersim_lora_loads_total"); n != 2 {
		t.Fatalf("%v loads, want 2", n)
	}
}

func TestTheKVEventsOfAnAdaptersSaltedPromptSayBoth(t *testing.T) {
	cfg := loraConfig()
	w, sub := kvWorkerOf(t, cfg)
	content := words(7, 2048)
	body, _ := json.Marshal(map[string]any{"model": "sql-lora", "cache_salt": "tenant-a", "max_tokens": 1,
		"messages": []map[string]string{{"role": "user", "content": content}}})
	if status, _, got := w.post(pathChatCompletions, string(body)); status != 200 {
		t.Fatalf("%d %s", status, got)
	}
	tokens := tokenize(t, w, content)
	full := len(tokens) / cfg.engine.BlockTokens
	heardAs(t, sub, kvevents.Identity("sql-lora", "tenant-a"), tokens, full)
	for _, other := range []string{kvevents.Identity("sql-lora", ""), kvevents.Identity("", "tenant-a"), ""} {
		if n := sub.MatchedAs(other, tokens); n != 0 {
			t.Errorf("identity %q matches %d blocks of sql-lora's salted prompt", other, n)
		}
	}
}

func TestTheLoRAModulesFlagTakesVLLMsJSON(t *testing.T) {
	var got serverConfig
	app := newApp(io.Discard, io.Discard, func(_ *cli.Context, cfg serverConfig) error { got = cfg; return nil })
	err := app.Run([]string{"workersim", "--lora-modules", `{"name":"sql-lora","path":"/a/sql"}`, "--lora-modules", "chat=/a/chat"})
	if err != nil || !got.lora || got.engine.MaxLoras != 1 || !slices.Equal(got.loras, []loraModule{{"sql-lora", "/a/sql"}, {"chat", "/a/chat"}}) {
		t.Fatalf("%+v %v", got.loras, err)
	}
	if err := app.Run([]string{"workersim", "--lora-modules", `{"name":"x"}`}); err == nil || !strings.Contains(err.Error(), "--lora-modules") {
		t.Fatalf("%v, want a refusal naming --lora-modules", err)
	}
}
