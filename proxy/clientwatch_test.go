package proxy

import (
	"net"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// TestAClientThatResetsMidRequestClosesTheUpstream: a client that leaves
// with a reset (not a FIN) while the worker computes is noticed by the
// watcher's look at its socket.
func TestAClientThatResetsMidRequestClosesTheUpstream(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Hold())
	r := startRouter(t, Config{}, w)
	conn, _ := rawPost(t, r.url, "/v1/completions", completion("x", false))
	testwait.Eventually(t, waitDeadline, func() bool { return w.Inference.Load() == 1 }, "the request to reach the worker")
	_ = conn.(*net.TCPConn).SetLinger(0) // close with a reset
	conn.Close()
	testwait.Eventually(t, waitDeadline, func() bool { return w.HungUp.Load() == 1 }, "the worker to see its connection closed")
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "load back to zero")
	if n := metric(t, r, "vllm_router_client_disconnects_total"); n != 1 {
		t.Fatalf("disconnects %v, want 1", n)
	}
}
