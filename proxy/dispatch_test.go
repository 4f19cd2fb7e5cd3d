package proxy

import (
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
)

// TestInferenceRequestsSkipTheAdminRouteTable: the admin API owns no
// inference path, so an inference request never goes through its route
// table; every other path still does, first.
func TestInferenceRequestsSkipTheAdminRouteTable(t *testing.T) {
	w := startFake(t, "w1")
	var consulted atomic.Int64
	admin := func(ctx *fasthttp.RequestCtx) bool {
		consulted.Add(1)
		if string(ctx.Path()) != "/workers" {
			return false
		}
		ctx.SetBodyString(`{"workers":[]}`)
		return true
	}
	p, err := buildProxyWith(Config{}, affinity.PolicyCacheAware, []Worker{{ID: 1, URL: w.URL, Role: RoleRegular}},
		func(d *Deps) { d.Admin = admin })
	if err != nil {
		t.Fatal(err)
	}
	url := serveProxy(t, p)
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		body := completion("x", false)
		if path == "/v1/chat/completions" {
			body = `{"model":"m","messages":[{"role":"user","content":"x"}]}`
		}
		if resp, got := post(t, url, path, body); resp.StatusCode != 200 {
			t.Fatalf("POST %s: status %d %s", path, resp.StatusCode, got)
		}
	}
	if n := consulted.Load(); n != 0 {
		t.Fatalf("the admin route table was consulted %d times for inference requests", n)
	}
	if resp, got := post(t, url, "/workers", `{}`); resp.StatusCode != 200 || got != `{"workers":[]}` {
		t.Fatalf("POST /workers: status %d %s; the admin API still answers its own paths", resp.StatusCode, got)
	}
	if n := consulted.Load(); n != 1 {
		t.Fatalf("the admin route table was consulted %d times for one admin request", n)
	}
}
