package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// saltedBody is a request of path's shape for model with a cache_salt
// field whose JSON value is salt ("" leaves it out).
func saltedBody(path, model, salt string) string {
	field := ""
	if salt != "" {
		field = `,"cache_salt":` + salt
	}
	switch path {
	case "/v1/completions":
		return fmt.Sprintf(`{"model":%q,"prompt":"a tenant's long prompt, long enough to hash"%s}`, model, field)
	case "/v1/messages":
		return fmt.Sprintf(`{"model":%q,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]%s}`, model, field)
	}
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]%s}`, model, field)
}

func TestABadCacheSaltIsA400InTheRoutesOwnShape(t *testing.T) {
	w := startFake(t, "w1")
	w.SetModels("m")
	p, url := serveProxyWith(t, Config{}, nil, w)
	modelsKnown(t, p, "m")
	huge, _ := json.Marshal(strings.Repeat("s", wire.MaxCacheSalt+1))
	for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/v1/messages"} {
		for name, salt := range map[string]string{"a number": "5", "an object": `{"a":1}`, "empty": `""`, "huge": string(huge)} {
			status, _, body := postMessages(t, url, path, saltedBody(path, "m", salt))
			if status != 400 || !strings.Contains(body, "cache_salt") {
				t.Errorf("%s, %s salt: %d %s, want a 400 naming cache_salt", path, name, status, body)
				continue
			}
			_, _, anthropic := anthropicErrorOf(body)
			if anthropic != (path == "/v1/messages") {
				t.Errorf("%s, %s salt: %s is not in the route's own error shape", path, name, body)
			}
		}
	}
	if n := w.Inference.Load(); n != 0 {
		t.Fatalf("%d bad requests reached the worker", n)
	}
	for _, salt := range []string{"null", `"tenant-a"`, `"` + strings.Repeat("s", wire.MaxCacheSalt) + `"`} {
		if status, _, body := postMessages(t, url, "/v1/chat/completions", saltedBody("/v1/chat/completions", "m", salt)); status != 200 {
			t.Errorf("salt %.20s: %d %s, want it served", salt, status, body)
		}
	}
	if !strings.Contains(w.LastBody(), `"cache_salt":"sss`) {
		t.Errorf("the salt did not reach the worker: %s", w.LastBody())
	}
}

func TestSaltedAndUnsaltedRequestsOfOneTextAreCachedApart(t *testing.T) {
	w1, w2 := startFake(t, "w1"), startFake(t, "w2")
	r := startRouter(t, Config{}, w1, w2)
	path := "/v1/completions"
	hits := func() string { return grepLines(scrape(t, r), "vllm_router_cache_hits_total") }
	for _, salt := range []string{`"tenant-a"`, `"tenant-a"`, "", `"tenant-b"`, ""} {
		if status, _, body := postMessages(t, r.url, path, saltedBody(path, "m", salt)); status != 200 {
			t.Fatalf("%d %s", status, body)
		}
	}
	// tenant-a's second request and the second unsalted one are hits; the
	// first unsalted one and tenant-b's match nothing of the others'.
	if h := hits(); !strings.Contains(h, " 2") {
		t.Fatalf("cache hits:\n%s\nwant 2", h)
	}
}

// prepared is what the proxy prepares for a request of model with salt.
func prepared(t *testing.T, p *Proxy, model, salt string) *affinity.Request {
	t.Helper()
	x := &exchange{in: wire.Inference{Model: model, Salt: salt, Text: affinity.Text{[]byte(strings.Repeat("x", 64))}}}
	return p.path.legs.prepare(p.path.legs.finalRouter(), x, 0)
}

func TestAnAdapterIsKnownByItsParentAndKeysItsRequests(t *testing.T) {
	w := startFake(t, "w1")
	w.SetAdapters("base", "sql-lora")
	p, err := buildProxyWith(Config{}, affinity.PolicyCacheAware, []Worker{{ID: 1, URL: w.URL, Role: RoleRegular}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) }) // never served: nothing to wait for
	modelsKnown(t, p, "base", "sql-lora")
	for _, tc := range []struct {
		model, salt, identity string
		adapter               bool
	}{
		{"sql-lora", "", "sql-lora", true},
		{"sql-lora", "t", kvevents.Identity("sql-lora", "t"), true},
		{"base", "", "", false},
		{"base", "t", kvevents.Identity("", "t"), false},
	} {
		req := prepared(t, p, tc.model, tc.salt)
		if req.CacheIdentity != tc.identity || (req.Adapter != 0) != tc.adapter ||
			(tc.adapter && req.Adapter != affinity.AdapterKeyOf(tc.model)) {
			t.Errorf("%s salted %q: identity %q adapter %d, want %q (an adapter: %v)", tc.model, tc.salt,
				req.CacheIdentity, req.Adapter, tc.identity, tc.adapter)
		}
	}
	if a, b := prepared(t, p, "sql-lora", "t"), prepared(t, p, "sql-lora", ""); a.Hashes[0] == b.Hashes[0] {
		t.Error("a salted request hashes like an unsalted one")
	}
}

func TestAdaptersLoadedOrUnloadedAtRunTimeAreRoutedWithinARefresh(t *testing.T) {
	w := startFake(t, "w1")
	w.SetAdapters("base")
	p, url := serveProxyWith(t, Config{LoRA: LoRAConfig{ModelRefresh: 20 * time.Millisecond}}, nil, w)
	modelsKnown(t, p, "base")
	body := saltedBody("/v1/completions", "new-lora", "")
	if status, _, got := postMessages(t, url, "/v1/completions", body); status != 404 || !strings.Contains(got, "new-lora") {
		t.Fatalf("%d %s, want a 404 naming new-lora", status, got)
	}
	w.SetAdapters("base", "new-lora")
	testwait.Eventually(t, waitDeadline, func() bool {
		status, _, _ := postMessages(t, url, "/v1/completions", body)
		return status == 200
	}, "an adapter loaded at run time served")
	w.SetAdapters("base")
	testwait.Eventually(t, waitDeadline, func() bool {
		status, _, _ := postMessages(t, url, "/v1/completions", body)
		return status == 404
	}, "an adapter unloaded at run time a 404")
}

// loader answers vLLM's load_lora_adapter with status, recording what it
// was asked, and any other request as the default fake does.
type loader struct {
	mu     sync.Mutex
	bodies []string
}

func (l *loader) behaviour(status int, w *fakeworker.Worker, base string) fakeworker.Behaviour {
	return func(e *fakeworker.Exchange) {
		if e.Req.URL.Path != pathLoadAdapter {
			fakeworker.Default()(e)
			return
		}
		l.mu.Lock()
		l.bodies = append(l.bodies, string(e.Body))
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // a load takes a moment: concurrent requests find it under way
		if status == 200 {
			var req struct {
				Name string `json:"lora_name"`
			}
			_ = json.Unmarshal(e.Body, &req)
			w.SetAdapters(base, "other-lora", req.Name)
		}
		e.JSON(status, `{"error":{"message":"no adapter at that path"}}`)
	}
}

func (l *loader) asked() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.bodies...)
}

func TestAnAdapterNoWorkerListsIsLoadedOnTheWorkerItIsPlacedOn(t *testing.T) {
	w1, w2 := startFake(t, "w1"), startFake(t, "w2")
	var l1, l2 loader
	w1.SetAdapters("base", "other-lora")
	w2.SetAdapters("base", "other-lora")
	w1.Set(l1.behaviour(200, w1, "base"))
	w2.Set(l2.behaviour(200, w2, "base"))
	p, url := serveProxyWith(t, Config{LoRA: LoRAConfig{LoadPath: "/adapters/{name}"}}, nil, w1, w2)
	testwait.Eventually(t, waitDeadline, func() bool {
		pool := p.fleet.view().lora[RoleRegular]
		return pool != nil && pool.Len() == 2
	}, "both workers' adapters known")
	// Where it goes, asked before any request moved the counts it is chosen by.
	want := p.fleet.view().members[p.path.legs.finalRouter().AdapterHome(affinity.AdapterKeyOf("new-lora"), p.fleet.view().lora[RoleRegular])].URL
	var wg sync.WaitGroup
	statuses := make([]int, 8)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _, _ = postMessages(t, url, "/v1/completions", saltedBody("/v1/completions", "new-lora", ""))
		}()
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 200 {
			t.Fatalf("request %d: %d, want 200 once the adapter is loaded", i, s)
		}
	}
	asked := append(l1.asked(), l2.asked()...)
	if len(asked) != 1 || asked[0] != `{"lora_name":"new-lora","lora_path":"/adapters/new-lora"}` {
		t.Fatalf("loads asked: %q, want one of new-lora from /adapters/new-lora", asked)
	}
	home := w1
	if len(l2.asked()) == 1 {
		home = w2
	}
	if home.URL != want {
		t.Fatalf("loaded on %s, want %s where it is placed", home.URL, want)
	}
	if n := home.Inference.Load(); n != 1+8 {
		t.Fatalf("the loading worker served %d requests (the load included), want 9", n)
	}
}

func TestAnAdapterThatCannotBeLoadedIsA404NamingIt(t *testing.T) {
	w := startFake(t, "w1")
	var l loader
	w.SetAdapters("base", "other-lora")
	w.Set(l.behaviour(404, w, "base"))
	p, url := serveProxyWith(t, Config{LoRA: LoRAConfig{LoadPath: "/adapters/{name}"}}, nil, w)
	modelsKnown(t, p, "base")
	status, _, body := postMessages(t, url, "/v1/chat/completions", saltedBody("/v1/chat/completions", "missing-lora", ""))
	if status != 404 || !strings.Contains(body, "missing-lora") || strings.Contains(body, "no adapter at that path") {
		t.Fatalf("%d %s, want a 404 naming the adapter, without the engine's words", status, body)
	}
	status, _, body = postMessages(t, url, "/v1/messages", saltedBody("/v1/messages", "missing-lora", ""))
	if typ, msg, ok := anthropicErrorOf(body); status != 404 || !ok || typ != "not_found_error" || !strings.Contains(msg, "missing-lora") {
		t.Fatalf("messages: %d %s, want Anthropic's 404 naming the adapter", status, body)
	}
}

func TestAnAdapterNameWithPathCharactersIsA400(t *testing.T) {
	w := startFake(t, "w1")
	w.SetAdapters("base", "ok-lora")
	p, url := serveProxyWith(t, Config{LoRA: LoRAConfig{LoadPath: "/adapters/{name}"}}, nil, w)
	modelsKnown(t, p, "base")
	for _, name := range []string{"../etc", "a/../../b", `a\b`, "a\x01"} {
		body, _ := json.Marshal(map[string]any{"model": name, "prompt": "hi"})
		if status, _, got := postMessages(t, url, "/v1/completions", string(body)); status != 400 {
			t.Errorf("%q: %d %s, want 400", name, status, got)
		}
	}
	if n := w.Inference.Load(); n != 0 {
		t.Fatalf("%d requests (or loads) reached the worker", n)
	}
}
