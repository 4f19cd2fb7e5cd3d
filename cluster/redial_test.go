package cluster

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// TestARaftDialToAPeerThatIsDownHoldsUntilItIsBack: Raft's dial to a peer
// that cannot be reached (here its port hangs up on every connection, so
// the TLS handshake fails) does not fail at once (each failure doubles
// hashicorp/raft's backoff, up to ~10 s that nothing wakes); it tries again
// until the peer answers, and connects then.
func TestARaftDialToAPeerThatIsDownHoldsUntilItIsBack(t *testing.T) {
	port, theirs := openPortAndPeerTLS(t)
	peer := startFlakyPeer(t, theirs)
	type dialed struct {
		conn net.Conn
		err  error
	}
	done := make(chan dialed, 1)
	go func() {
		conn, err := port.RaftLayer().Dial(raft.ServerAddress(peer.addr), time.Second)
		done <- dialed{conn, err}
	}()
	testwait.Eventually(t, testDeadline, func() bool { return redials(port) >= 3 }, "the dial to be refused and tried again")
	peer.up.Store(true) // the peer is back
	select {
	case d := <-done:
		if d.err != nil {
			t.Fatalf("the dial failed (%v) although the peer came back", d.err)
		}
		d.conn.Close()
	case <-time.After(testDeadline):
		t.Fatal("the dial did not connect once the peer answered again")
	}
}

// flakyPeer is a cluster port that hangs up on every connection until up,
// then completes the TLS handshake and takes the link.
type flakyPeer struct {
	addr string
	up   atomic.Bool
}

func startFlakyPeer(t *testing.T, tlsState *link.TLS) *flakyPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyPeer{addr: ln.Addr().String()}
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.up.Load() {
				conn.Close()
				continue
			}
			tc := tls.Server(conn, tlsState.ServerConfig())
			_ = tc.SetDeadline(time.Now().Add(testDeadline))
			var link [1]byte
			_, _ = io.ReadFull(tc, link[:]) // the handshake, then the link byte
			tc.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-served })
	return p
}

// TestARaftDialHeldAtShutdownEndsAtOnce: a held dial never keeps Raft's
// shutdown waiting.
func TestARaftDialHeldAtShutdownEndsAtOnce(t *testing.T) {
	port, theirs := openPortAndPeerTLS(t)
	peer := startFlakyPeer(t, theirs) // never up
	done := make(chan error, 1)
	go func() {
		_, err := port.RaftLayer().Dial(raft.ServerAddress(peer.addr), time.Second)
		done <- err
	}()
	testwait.Eventually(t, testDeadline, func() bool { return redials(port) >= 1 }, "the dial to hold")
	port.StopHolding()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a dial to a peer that hangs up succeeded")
		}
	case <-time.After(testDeadline):
		t.Fatal("the held dial outlived stopHolding")
	}
}

// TestALeaderDoesNotBackOffFromAFollowerThatIsDown: while a follower is
// down, the leader's replication to it fails about once per held dial, not
// once per backoff round, so when it comes back the next write reaches it
// without waiting out a backoff of seconds.
func TestALeaderDoesNotBackOffFromAFollowerThatIsDown(t *testing.T) {
	var failures atomic.Int64
	count := func(cfg *Config) {
		cfg.ReapTimeout = time.Hour // no reap-and-re-add to hide the backoff
		cfg.Logger = slog.New(&messageCounter{match: "failed to appendEntries", n: &failures})
	}
	c := newTestCluster(t, 1)
	c.startN(3, count)
	c.waitReady()
	leader := c.leader()
	name := c.follower().cfg.NodeName
	old := c.replicas[name]
	tries := leader.raft.Port().Redials()
	c.stop(name, false)
	before := failures.Load()
	// An outage of 5 s, counted in the leader's tries of its held dials (one
	// per redial pause of 250 ms), so that a slow machine makes it no
	// shorter: hashicorp/raft, its dials refused at once, would fail about
	// ten times in it (10 ms doubling to 2.56 s). Failures past the limit
	// end it early, since dials that do not hold make no tries to count.
	const outage, limit = 20, 3
	testwait.Eventually(t, testDeadline, func() bool {
		return leader.raft.Port().Redials() >= tries+outage || failures.Load()-before > limit
	}, "the leader tries its held dial to %s %d times", name, outage)
	during, held := failures.Load()-before, leader.raft.Port().Redials()-tries
	t.Logf("%d failed appendEntries to %s in an outage of %d held-dial tries", during, name, held)
	if during > limit {
		t.Errorf("%d failed appendEntries in an outage of %d held-dial tries (%d make 5 s), want at most %d (raft backs off after each)", during, held, outage, limit)
	}
	back := c.restart(name, true, old)
	healed := time.Now()
	extra := startFakeWorker(t, "w9")
	testwait.Eventually(t, testDeadline, func() bool {
		return c.do(back, http.MethodPost, "/workers", `{"url":"`+extra.url+`"}`).Status == http.StatusCreated
	}, "a write through the restarted replica")
	testwait.Eventually(t, testDeadline, func() bool {
		_, ok := back.fsm.View().WorkerByURL(extra.url)
		return ok
	}, "the write made through the restarted replica in its own registry")
	t.Logf("a write made through %s was in its registry %v after its restart", name, time.Since(healed))
}

// redials is how many tries held raft dials on port have made.
func redials(p *link.Port) int64 { return p.Redials() }

// messageCounter is a slog handler that counts the records whose message
// contains match.
type messageCounter struct {
	match string
	n     *atomic.Int64
}

func (h *messageCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *messageCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.n.Add(1)
	}
	return nil
}
func (h *messageCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *messageCounter) WithGroup(string) slog.Handler      { return h }

// openPortAndPeerTLS opens r0's cluster port on loopback, closed when the
// test ends, and returns it with r1's cluster TLS, for a peer to dial it.
func openPortAndPeerTLS(t *testing.T) (*link.Port, *link.TLS) {
	t.Helper()
	dir := certDir(t, "r0", "r1")
	ours, err := link.LoadTLS(link.NodeTLSFiles(dir, "r0"))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := link.LoadTLS(link.NodeTLSFiles(dir, "r1"))
	if err != nil {
		t.Fatal(err)
	}
	port, err := link.Open("127.0.0.1:0", nil, ours, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { port.Close() })
	return port, theirs
}
