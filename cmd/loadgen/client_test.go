package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/sim/workload"
)

func testRequest() workload.Request {
	return workload.Request{Model: "m", Prompt: []byte("a prompt of some forty bytes, give or take"), MaxTokens: 5}
}

func newTestClient(t *testing.T, target string, clock Clock) *client {
	t.Helper()
	c, err := newClient(clientConfig{targets: []string{target}, apiKey: "secret", timeout: time.Minute}, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

func TestClientMeasuresAStreamedCompletion(t *testing.T) {
	server := newFakeServer(t, 3)
	c := newTestClient(t, server.url, clock.RealClock{})
	res := c.do(context.Background(), testRequest(), http.Header{sessionHeader: {"s1"}})
	if !res.ok() {
		t.Fatalf("request failed: %s %v", res.errKind, res.err)
	}
	if res.status != 200 || res.worker == "" || res.events != 6 {
		t.Fatalf("status %d worker %q events %d; want 200, a worker, 5 token events and the usage", res.status, res.worker, res.events)
	}
	if res.ttft <= 0 || res.latency < res.ttft {
		t.Fatalf("ttft %v latency %v; want 0 < ttft <= latency", res.ttft, res.latency)
	}
	if res.usage == nil || res.usage.promptTokens != 10 || res.usage.completionTokens != 5 {
		t.Fatalf("usage %+v, want 10 prompt and 5 completion tokens", res.usage)
	}
	got := server.requests()[0]
	if got.auth != "Bearer secret" || got.session != "s1" {
		t.Fatalf("server saw authorization %q session %q", got.auth, got.session)
	}
}

func TestClientClassifiesFailures(t *testing.T) {
	for _, tc := range []struct {
		fault fault
		kind  string
	}{
		{faultStatus503, "status_503"},
		{faultCut, kindStreamCut},
		{faultStreamError, kindStreamError},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			server := newFakeServer(t, 1)
			server.fault = func(fakeRequest) fault { return tc.fault }
			res := newTestClient(t, server.url, clock.RealClock{}).do(context.Background(), testRequest(), nil)
			if res.errKind != tc.kind || res.err == nil || res.cancelled {
				t.Fatalf("got kind %q (%v), cancelled %v; want %q", res.errKind, res.err, res.cancelled, tc.kind)
			}
			if res.worker != "w0" {
				t.Fatalf("worker %q, want the one that answered", res.worker)
			}
		})
	}
}

func TestClientWithoutUsageStillSucceeds(t *testing.T) {
	server := newFakeServer(t, 1)
	server.fault = func(fakeRequest) fault { return faultNoUsage }
	res := newTestClient(t, server.url, clock.RealClock{}).do(context.Background(), testRequest(), nil)
	if !res.ok() || res.usage != nil || res.events != 5 {
		t.Fatalf("ok %v usage %+v events %d; want a success without usage and 5 events", res.ok(), res.usage, res.events)
	}
}

func TestClientReportsTransportErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	res := newTestClient(t, "http://"+addr, clock.RealClock{}).do(context.Background(), testRequest(), nil)
	if res.errKind != kindTransport || res.status != 0 {
		t.Fatalf("kind %q status %d, want a transport error", res.errKind, res.status)
	}
}

func TestClientTimesOutOnItsClock(t *testing.T) {
	server := newFakeServer(t, 1)
	server.setHold(0)
	clock := newVirtualClock()
	c := newTestClient(t, server.url, clock)
	done := make(chan result)
	go func() { done <- c.do(context.Background(), testRequest(), nil) }()
	waitFor(t, "the request to arrive", func() bool { return len(server.requests()) == 1 })
	clock.Advance(time.Minute)
	if res := <-done; res.errKind != kindTimeout || !errors.Is(res.err, errRequestTimeout) || res.cancelled {
		t.Fatalf("kind %q err %v cancelled %v; want a timeout error", res.errKind, res.err, res.cancelled)
	}
}

func TestClientCancelledWithTheRun(t *testing.T) {
	server := newFakeServer(t, 1)
	server.setHold(0)
	c := newTestClient(t, server.url, clock.RealClock{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result)
	go func() { done <- c.do(ctx, testRequest(), nil) }()
	waitFor(t, "the request to arrive", func() bool { return len(server.requests()) == 1 })
	cancel()
	if res := <-done; !res.cancelled || res.errKind != "" {
		t.Fatalf("cancelled %v kind %q; want cancelled and no error", res.cancelled, res.errKind)
	}
}

func TestCompletionsURL(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"http://127.0.0.1:8000", "http://127.0.0.1:8000/v1/completions"},
		{"http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1/completions"},
		{"https://host/prefix", "https://host/prefix/v1/completions"},
		{"http://127.0.0.1:8000/v1/completions", "http://127.0.0.1:8000/v1/completions"},
	} {
		if got, err := completionsURL(tc.target); err != nil || got != tc.want {
			t.Errorf("completionsURL(%q) = %q, %v; want %q", tc.target, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:8000", "ftp://host", "http://", "http://[::1"} {
		if _, err := completionsURL(bad); !errors.Is(err, errBadTarget) {
			t.Errorf("completionsURL(%q) = %v, want errBadTarget", bad, err)
		}
	}
}

// BenchmarkClientStream measures one streamed request of 16 token events end to end on
// loopback, the server included: an upper bound of the generator's cost per request.
func BenchmarkClientStream(b *testing.B) {
	server := newFakeServer(b, 4)
	server.tokenCap = 16
	c, err := newClient(clientConfig{targets: []string{server.url}, timeout: time.Minute}, clock.RealClock{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.close()
	req := workload.Request{Prompt: workload.PromptFor(workload.TraceRecord{InputLength: 1024, HashIDs: []int64{0, 1}}), MaxTokens: 16}
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res := c.do(context.Background(), req, nil); !res.ok() {
				b.Errorf("request failed: %v", res.err)
			}
		}
	})
}
