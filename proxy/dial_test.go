package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/dialtest"
	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// TestADialToARefusedAddressIsRefused: workers registered by names that
// resolve to a metadata and a link-local address are never connected to,
// by inference, its retries, model discovery, the flush fan-out or a
// stored-response lookup; the worker whose name resolves to loopback is
// reached through the same dialer.
func TestADialToARefusedAddressIsRefused(t *testing.T) {
	good := startFake(t, "good")
	good.SetModels("m")
	_, port, _ := net.SplitHostPort(good.Addr)
	var log dialtest.Log
	dialer := &workerurl.Dialer{Connect: log.Connect, Resolver: dialtest.Resolver{
		"metadata.internal": "169.254.169.254", "linklocal.internal": "fe80::1", "good.internal": "127.0.0.1"}}
	ws := []Worker{{ID: 1, URL: "http://metadata.internal:" + port, Role: RoleRegular},
		{ID: 2, URL: "http://linklocal.internal:" + port, Role: RoleRegular},
		{ID: 3, URL: "http://good.internal:" + port, Role: RoleRegular}}
	cfg := Config{Retry: Retry{MaxAttempts: 3, InitialBackoff: time.Millisecond}}
	p, err := buildProxyAll(cfg, "", affinity.PolicyLeastLoad, ws, nil, slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(d *Deps) { d.Dialer = dialer })
	if err != nil {
		t.Fatal(err)
	}
	url := serveProxy(t, p)
	for i := range 3 {
		if resp, body := post(t, url, "/v1/completions", completion("hello", false)); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	for _, w := range ws {
		_, _ = p.calls.listModels(context.Background(), w)
		_ = p.flush(context.Background(), w)
	}
	_, _ = callKey(t, "GET", url+"/v1/responses/resp_x", "", "")
	tried := log.Attempts()
	if len(tried) == 0 {
		t.Fatal("no connection went through the dialer")
	}
	for _, a := range tried {
		if a != "127.0.0.1:"+port {
			t.Fatalf("a connection was attempted to %s", a)
		}
	}
}
