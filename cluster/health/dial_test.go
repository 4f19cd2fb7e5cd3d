package health

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

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

// Health checks, engine scrapes and recovery probes dial through the
// worker-host policy: a registered name that resolves to a metadata or
// link-local address is never connected to, and a name that resolves to
// an allowed address is probed as usual, through the same dialer.
func TestProbesNeverConnectToARefusedAddress(t *testing.T) {
	fw := startFakeWorker(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(fw.url, "http://"))
	var log dialLog
	p := prober{timeout: 5 * time.Second, dialer: &workerurl.Dialer{
		Resolver: namedResolver{"metadata.test": "169.254.169.254", "linklocal.test": "fe80::1", "worker.test": "127.0.0.1"},
		Connect:  log.connect}}
	ctx := context.Background()
	for _, name := range []string{"metadata.test", "linklocal.test"} {
		target, err := newProbeTarget("http://"+name+":"+port, "/health")
		if err != nil {
			t.Fatal(err)
		}
		if err := p.probe(ctx, target); err == nil {
			t.Errorf("%s: the health probe succeeded", name)
		}
		if _, err := p.scrape(ctx, target, time.Second); err == nil {
			t.Errorf("%s: the scrape succeeded", name)
		}
		if _, err := p.generate(ctx, target, "m", time.Second); err == nil {
			t.Errorf("%s: the recovery probe succeeded", name)
		}
	}
	if tried := log.attempts(); len(tried) != 0 {
		t.Fatalf("connections attempted to %v", tried)
	}
	target, _ := newProbeTarget("http://worker.test:"+port, "/health")
	if err := p.probe(ctx, target); err != nil {
		t.Fatalf("an allowed worker: %v", err)
	}
	if tried := log.attempts(); len(tried) != 1 || tried[0] != "127.0.0.1:"+port {
		t.Fatalf("attempts %v, want the allowed worker's address once", tried)
	}
}
