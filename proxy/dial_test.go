package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// namedResolver maps names to addresses; nothing is looked up for real.
type namedResolver map[string]string

func (r namedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// dialLog records every connection attempt, and makes only those to
// loopback: no packet leaves the machine, whatever the code under test
// asks for.
type dialLog struct {
	mu    sync.Mutex
	tried []string
}

func (l *dialLog) connect(ctx context.Context, network, address string) (net.Conn, error) {
	l.mu.Lock()
	l.tried = append(l.tried, address)
	l.mu.Unlock()
	if !strings.HasPrefix(address, "127.0.0.1:") {
		return nil, errors.New("the test connects to loopback only") // recorded, never sent
	}
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

func (l *dialLog) attempts() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.tried...)
}

// TestADialToARefusedAddressIsRefused: workers registered by names that
// resolve to a metadata and a link-local address are never connected to,
// by inference, its retries, model discovery, the flush fan-out or a
// stored-response lookup; the worker whose name resolves to loopback is
// reached through the same dialer.
func TestADialToARefusedAddressIsRefused(t *testing.T) {
	good := startFake(t, "good")
	good.SetModels("m")
	_, port, _ := net.SplitHostPort(good.Addr)
	var log dialLog
	dialer := &workerurl.Dialer{Connect: log.connect, Resolver: namedResolver{
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
		_, _ = p.listModels(context.Background(), w)
		_ = p.flush(context.Background(), w)
	}
	_, _ = callKey(t, "GET", url+"/v1/responses/resp_x", "", "")
	tried := log.attempts()
	if len(tried) == 0 {
		t.Fatal("no connection went through the dialer")
	}
	for _, a := range tried {
		if a != "127.0.0.1:"+port {
			t.Fatalf("a connection was attempted to %s", a)
		}
	}
}

// serveProxy serves p on a loopback port until the test ends.
func serveProxy(t *testing.T, p *Proxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
		<-done
	})
	return "http://" + ln.Addr().String()
}
