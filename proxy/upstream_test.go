package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// TestAnIdleConnectionPastItsLastDeadlineIsReused: a pooled connection
// keeps the deadline of its last exchange; once that passed, the look at
// it before reuse must not take the expired deadline for a broken socket.
func TestAnIdleConnectionPastItsLastDeadlineIsReused(t *testing.T) {
	u, c, _ := dialedUpstream(t) // the server end stays open, silent
	past := time.Now().Add(-time.Millisecond)
	if err := c.SetDeadline(past); err != nil {
		t.Fatal(err)
	}
	c.deadline = past
	now := time.Now()
	u.release(c, true, now)
	if got := u.takeIdle(now); got != c {
		t.Fatal("a quiet idle connection was not reused")
	}
	u.release(c, true, now)
}

// dialedUpstream is an upstream pool to a loopback listener, one connection
// it dialled, and the server's end of that connection; all are closed when
// the test ends.
func dialedUpstream(t *testing.T) (*upstream, *upConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := newUpstream(ln.Addr().String(), false, time.Second, 4, &workerurl.Dialer{})
	t.Cleanup(u.close)
	c, err := u.dial(t.Context(), time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return u, c, server
}

// hangUpAfterReading reads the whole request (the fake worker does before
// any behaviour) and closes the connection without answering: a worker that
// dies, or drops a pooled connection, after the request reached it.
func hangUpAfterReading(e *fakeworker.Exchange) { e.Cut() }

// TestAReusedConnectionThatFailsAfterTheRequestIsAnAttempt: once a request
// was written on a pooled connection, the worker may be acting on it; a
// failure then is an attempt like any other, counted, and sent again only
// by the retry policy, never silently.
func TestAReusedConnectionThatFailsAfterTheRequestIsAnAttempt(t *testing.T) {
	body := `{"model":"m","input":"write the report"}`
	t.Run("retried and counted", func(t *testing.T) {
		w := startFake(t, "w1")
		w.Set(fakeworker.Sequence(fakeworker.Default(), hangUpAfterReading, fakeworker.Default()))
		r := startRouter(t, Config{Retry: Retry{MaxAttempts: 2}}, w)
		for i := range 2 {
			if resp, got := post(t, r.url, "/v1/responses", body); resp.StatusCode != 200 {
				t.Fatalf("request %d: status %d %s", i, resp.StatusCode, got)
			}
		}
		// At least 2 connections: the cut one and the retry's. Under load the
		// first request's connection can come back to the pool after the
		// second request has dialled its own, so more is no fault.
		if w.Conns.Load() < 2 || w.Inference.Load() != 3 {
			t.Fatalf("%d connections, %d requests at the worker; want at least 2 and 3", w.Conns.Load(), w.Inference.Load())
		}
		if got := metric(t, r, "vllm_router_retries_total"); got != 1 {
			t.Fatalf("%v retries counted; the request sent again on a new connection is a retry", got)
		}
	})
	t.Run("last attempt passed to the client", func(t *testing.T) {
		w := startFake(t, "w1")
		w.Set(fakeworker.Sequence(fakeworker.Default(), hangUpAfterReading, fakeworker.Default()))
		r := startRouter(t, Config{Retry: Retry{MaxAttempts: 1}}, w)
		if resp, got := post(t, r.url, "/v1/responses", body); resp.StatusCode != 200 {
			t.Fatalf("first request: status %d %s", resp.StatusCode, got)
		}
		if resp, got := post(t, r.url, "/v1/responses", body); resp.StatusCode != 502 {
			t.Fatalf("status %d %s; want the 502 of the one attempt allowed", resp.StatusCode, got)
		}
		if w.Inference.Load() != 2 {
			t.Fatalf("the worker got %d requests; with one attempt allowed, the failed one is not sent again", w.Inference.Load())
		}
	})
}

// TestALongAnswerReadWholeReusesItsConnection: a connection's idle time
// starts at the end of its answer, so an answer that took longer than the
// idle timeout leaves a connection as reusable as a quick one. (The margin
// is wide: the next request comes at once, the idle timeout is 2 s.)
func TestALongAnswerReadWholeReusesItsConnection(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Sequence(fakeworker.SlowHeaders(3*time.Second), fakeworker.Default()))
	r := startRouter(t, Config{WorkerIdleTimeout: 2 * time.Second}, w)
	var conns int64 // after the first answer: model discovery has connections of its own
	for i := range 2 {
		if resp, body := post(t, r.url, "/v1/completions", completion("x", false)); resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d %s", i, resp.StatusCode, body)
		}
		if i == 0 {
			conns = w.Conns.Load()
		}
	}
	if got := w.Conns.Load() - conns; got != 0 {
		t.Fatalf("the second request made %d new connections; it should reuse the first's", got)
	}
}

// TestAConnectionIdleLongerThanTheWorkerIdleTimeoutIsNotReused: the
// setting is what takeIdle obeys.
func TestAConnectionIdleLongerThanTheWorkerIdleTimeoutIsNotReused(t *testing.T) {
	u, c, _ := dialedUpstream(t)
	u.idleTimeout = time.Second
	now := time.Now()
	u.release(c, true, now)
	if got := u.takeIdle(now.Add(time.Second)); got != nil {
		t.Fatal("a connection idle for the whole idle timeout was reused")
	}
	c2, err := u.dial(t.Context(), now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	u.release(c2, true, now)
	if got := u.takeIdle(now.Add(999 * time.Millisecond)); got != c2 {
		t.Fatal("a connection idle for less than the idle timeout was not reused")
	}
	c2.Close()
}
