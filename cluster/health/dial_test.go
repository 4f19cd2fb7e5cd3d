package health

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/dialtest"
	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// Health checks, engine scrapes and recovery probes dial through the
// worker-host policy: a registered name that resolves to a metadata or
// link-local address is never connected to, and a name that resolves to
// an allowed address is probed as usual, through the same dialer.
func TestProbesNeverConnectToARefusedAddress(t *testing.T) {
	fw := startFakeWorker(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(fw.url, "http://"))
	var log dialtest.Log
	p := workerClient{timeout: 5 * time.Second, dialer: &workerurl.Dialer{
		Resolver: dialtest.Resolver{"metadata.test": "169.254.169.254", "linklocal.test": "fe80::1", "worker.test": "127.0.0.1"},
		Connect:  log.Connect}}
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
	if tried := log.Attempts(); len(tried) != 0 {
		t.Fatalf("connections attempted to %v", tried)
	}
	target, _ := newProbeTarget("http://worker.test:"+port, "/health")
	if err := p.probe(ctx, target); err != nil {
		t.Fatalf("an allowed worker: %v", err)
	}
	if tried := log.Attempts(); len(tried) != 1 || tried[0] != "127.0.0.1:"+port {
		t.Fatalf("attempts %v, want the allowed worker's address once", tried)
	}
}
