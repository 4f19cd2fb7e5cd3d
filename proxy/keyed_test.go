package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// keyTenantName is the tenant of a key without --api-key-tenants.
func keyTenantName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "key:" + hex.EncodeToString(sum[:6])
}

// keyedClasses is a router config with classes, the keys k1 (held to bulk)
// and k2, and the tenant header x-tenant.
func keyedClasses() Config {
	cfg := classesConfig()
	cfg.APIKeys = []string{"k1", "k2"}
	cfg.Admission.KeyClasses = map[string]string{"k1": "bulk"}
	cfg.Admission.TenantHeader = "x-tenant"
	return cfg
}

// The door and admission read one credential: every spelling of k1 is k1,
// with its class and its tenant. "bearer k1" used to pass the door and
// lose the class at admission; "Bearer  k1" was a tenant of its own; and
// x-api-key (Anthropic's form) was a 401.
func TestEverySpellingOfAKeyIsOneCaller(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, keyedClasses(), w)
	sent := 0
	for _, spellings := range [][][]string{
		{{"Authorization", "Bearer k1"}, {"Authorization", "bearer k1"}, {"Authorization", "Bearer  k1"}},
		{{"x-api-key", "k1"}, {"Authorization", "Bearer k1", "x-api-key", "k1"}},
	} {
		for _, h := range spellings {
			if status, body := postWith(t, r.url, h...); status != http.StatusOK {
				t.Fatalf("%q: %d %s", h, status, body)
			}
			if got := w.LastHeader(); got.Get("Authorization") != "" || got.Get("x-api-key") != "" {
				t.Fatalf("%q: the client's key reached the worker: %v", h, got)
			}
		}
		sent += len(spellings)
		want := fmt.Sprintf(`vllm_router_admission_admitted_total{class="bulk",tenant=%q}`, keyTenantName("k1"))
		if got := metric(t, r, want); got != float64(sent) {
			t.Fatalf("after %q: %s = %v, want %d: a spelling lost the key's class or tenant", spellings, want, got, sent)
		}
	}
	if status, body := postWith(t, r.url, "Authorization", "Bearer k1", "x-api-key", "k2"); status != http.StatusUnauthorized ||
		!strings.Contains(body, "two different") {
		t.Fatalf("two different keys: %d %s, want 401", status, body)
	}
}

// x-api-key opens every route that Authorization opens, and a wrong one
// none.
func TestTheAnthropicKeyHeaderOpensEveryRoute(t *testing.T) {
	w := startFake(t, "w1")
	cfg := Config{APIKeys: []string{"k1"}}
	_, base := serveProxyWith(t, cfg, func(d *Deps) { d.AdminToken = adminToken("adm") }, w)
	for _, rt := range routes {
		if rt.access == open {
			continue
		}
		if got := sendSampleWith(t, base, rt.sample, "x-api-key", "wrong"); got != http.StatusUnauthorized {
			t.Errorf("%s with a wrong x-api-key: %d, want 401", rt.sample, got)
		}
		if got := sendSampleWith(t, base, rt.sample, "x-api-key", "k1"); got == http.StatusUnauthorized {
			t.Errorf("%s with x-api-key k1: 401", rt.sample)
		}
	}
	if got := sendSampleWith(t, base, "GET /metrics", "x-api-key", "adm"); got != http.StatusOK {
		t.Errorf("/metrics with the admin token as x-api-key: %d", got)
	}
}

// sendSampleWith is sendSample with one header of any name.
func sendSampleWith(t *testing.T, base, sample, name, value string) int {
	t.Helper()
	method, path, _ := strings.Cut(sample, " ")
	var body *strings.Reader
	if method == http.MethodPost {
		body = strings.NewReader(completion("x", false))
	} else {
		body = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, base+path, body)
	req.Header.Set(name, value)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("%s: %v", sample, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A key held to bulk that asks for system gets bulk: a key's class is the
// highest its requests get. A lower class it may ask for; without keys a
// header is taken as sent.
func TestAKeyIsHeldToItsClass(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, keyedClasses(), w)
	for _, c := range []struct{ key, asked, want string }{
		{"k1", "system", "bulk"}, {"k1", "0", "bulk"}, {"k1", "interactive", "bulk"},
		{"k2", "system", "default"}, {"k2", "bulk", "bulk"},
	} {
		before := metric(t, r, fmt.Sprintf(`vllm_router_admission_admitted_total{class=%q,tenant=%q}`, c.want, keyTenantName(c.key)))
		if status, body := postWith(t, r.url, "Authorization", "Bearer "+c.key, "x-priority", c.asked); status != http.StatusOK {
			t.Fatalf("%s asking %s: %d %s", c.key, c.asked, status, body)
		}
		if after := metric(t, r, fmt.Sprintf(`vllm_router_admission_admitted_total{class=%q,tenant=%q}`, c.want,
			keyTenantName(c.key))); after != before+1 {
			t.Errorf("%s asking for %s was not admitted as %s:\n%s", c.key, c.asked, c.want, metricsText(r))
		}
	}
	open := startRouter(t, classesConfig(), w)
	postWith(t, open.url, "x-priority", "system")
	if got := metric(t, open, `vllm_router_admission_admitted_total{class="system",tenant="anonymous"}`); got != 1 {
		t.Fatalf("without keys x-priority: system is system: %v", got)
	}
}

// With keys, a tenant header that names another key's tenant is refused
// (it used to make that tenant wait), and so is a made-up one (it used to
// be a new tenant per request, past --tenant-max-inflight).
func TestAKeyCannotNameAnotherKeysTenant(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, keyedClasses(), w)
	for _, tenant := range []string{keyTenantName("k1"), "made-up-1"} {
		status, body := postWith(t, r.url, "Authorization", "Bearer k2", "x-tenant", tenant)
		if status != http.StatusForbidden || !strings.Contains(body, "x-tenant") {
			t.Errorf("k2 naming tenant %s: %d %s, want 403 naming the header", tenant, status, body)
		}
	}
	if n := w.Inference.Load(); n != 0 {
		t.Fatalf("%d refused requests reached the worker", n)
	}
}

// A key that names a new tenant per request does not pass
// --tenant-max-inflight: with keys its requests are its own tenant's.
func TestMadeUpTenantsDoNotPassTheTenantCeiling(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Hold())
	cfg := keyedClasses()
	cfg.Admission.TenantMaxInFlight = 1
	r := startRouter(t, cfg, w)
	first := make(chan int, 1)
	go func() { s, _ := postWith(t, r.url, "Authorization", "Bearer k2"); first <- s }()
	testwait.Eventually(t, waitDeadline, func() bool { return w.Inference.Load() == 1 }, "k2's first request at the worker")
	spoof := make(chan int, 1)
	go func() {
		s, _ := postWith(t, r.url, "Authorization", "Bearer k2", "x-tenant", "another-one")
		spoof <- s
	}()
	testwait.Eventually(t, waitDeadline, func() bool { return len(spoof) == 1 || w.Inference.Load() > 1 },
		"the request naming a made-up tenant to be answered or to reach the worker")
	if w.Inference.Load() > 1 {
		w.Open()
		t.Fatal("a made-up tenant got past the ceiling")
	}
	queued := make(chan int, 1)
	go func() { s, _ := postWith(t, r.url, "Authorization", "Bearer k2"); queued <- s }()
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 1 }, "k2's second request to wait")
	if n := w.Inference.Load(); n != 1 {
		t.Fatalf("%d requests of one tenant at the worker, want its ceiling of 1", n)
	}
	w.Open()
	if a, b := <-first, <-queued; a != http.StatusOK || b != http.StatusOK {
		t.Fatalf("once the first ended: %d, %d", a, b)
	}
}

// --api-key-tenants: keys share a tenant, and a key names in the header
// only a tenant it is given.
func TestAKeyNamesOnlyItsTenants(t *testing.T) {
	w := startFake(t, "w1")
	cfg := keyedClasses()
	cfg.Admission.KeyTenants = map[string][]string{"k1": {"acme"}, "k2": {"acme", "acme-batch"}}
	r := startRouter(t, cfg, w)
	for _, c := range []struct{ key, header, want string }{
		{"k1", "", "acme"}, {"k2", "", "acme"}, {"k2", "acme-batch", "acme-batch"},
	} {
		h := []string{"Authorization", "Bearer " + c.key}
		if c.header != "" {
			h = append(h, "x-tenant", c.header)
		}
		if status, body := postWith(t, r.url, h...); status != http.StatusOK {
			t.Fatalf("%s naming %q: %d %s", c.key, c.header, status, body)
		}
	}
	if status, body := postWith(t, r.url, "Authorization", "Bearer k1", "x-tenant", "acme-batch"); status != http.StatusForbidden ||
		!strings.Contains(body, "acme") {
		t.Fatalf("k1 naming k2's other tenant: %d %s, want 403 naming its own", status, body)
	}
	text := metricsText(r)
	for _, want := range []string{`vllm_router_admission_admitted_total{class="bulk",tenant="acme"} 1`,
		`vllm_router_admission_admitted_total{class="default",tenant="acme"} 1`,
		`vllm_router_admission_admitted_total{class="default",tenant="acme-batch"} 1`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s\n%s", want, text)
		}
	}
}

// A browser may send the key as x-api-key (Anthropic's SDK does): the
// preflight allows it.
func TestAPreflightAllowsTheAnthropicKeyHeader(t *testing.T) {
	r := startRouter(t, Config{CORSOrigins: []string{"https://app.example"}})
	req, _ := http.NewRequest(http.MethodOptions, r.url+"/v1/completions", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "x-api-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Access-Control-Allow-Headers"); !strings.Contains(strings.ToLower(got), "x-api-key") {
		t.Fatalf("Access-Control-Allow-Headers %q lacks x-api-key", got)
	}
}
