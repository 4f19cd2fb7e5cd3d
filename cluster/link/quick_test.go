package link

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// quickPeer is a cluster port answering the peers' HTTP with h, and a
// Quick that dials it.
func quickPeer(t testing.TB, h fasthttp.RequestHandler) (*Quick, string) {
	t.Helper()
	port, err := Open("127.0.0.1:0", nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(ctx, port.RPCListener(), h, ServerLimits{Timeout: time.Minute, MaxBody: 1 << 20})
	}()
	q := NewQuick(port)
	t.Cleanup(func() {
		q.Close()
		cancel()
		<-done
		_ = port.Close()
	})
	return q, port.Addr().String()
}

// connsSeen answers every question with its body and records the
// connection each came on.
type connsSeen struct {
	mu    sync.Mutex
	ids   []uint64
	conns []net.Conn
}

func (s *connsSeen) handle(ctx *fasthttp.RequestCtx) {
	s.mu.Lock()
	s.ids = append(s.ids, ctx.ConnID())
	s.conns = append(s.conns, ctx.Conn())
	s.mu.Unlock()
	ctx.SetBody(append([]byte("echo "), ctx.PostBody()...))
}

func (s *connsSeen) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[uint64]bool{}
	for _, id := range s.ids {
		seen[id] = true
	}
	return len(seen)
}

func post(t *testing.T, q *Quick, addr, body string) string {
	t.Helper()
	status, got, err := q.Post(addr, "/q", []byte(body), time.Now().Add(10*time.Second))
	if err != nil || status != fasthttp.StatusOK {
		t.Fatalf("Post %q: %d %q %v", body, status, got, err)
	}
	return string(got)
}

// TestQuickPutsItsQuestionsOnOneKeptConnection: questions one after
// another are answered, each its own, over the connection the first one
// dialled.
func TestQuickPutsItsQuestionsOnOneKeptConnection(t *testing.T) {
	seen := &connsSeen{}
	q, addr := quickPeer(t, seen.handle)
	for _, body := range []string{"a", "b", "c"} {
		if got := post(t, q, addr, body); got != "echo "+body {
			t.Fatalf("asked %q, answered %q", body, got)
		}
	}
	if n := seen.distinct(); n != 1 {
		t.Fatalf("three questions came on %d connections, want 1 kept", n)
	}
}

// TestQuickAsksAgainOnAFreshConnectionWhenThePeerClosedTheKeptOne: a peer
// that closed the idle connection (its idle timeout, a restart) costs the
// next question a dial, not an error.
func TestQuickAsksAgainOnAFreshConnectionWhenThePeerClosedTheKeptOne(t *testing.T) {
	seen := &connsSeen{}
	q, addr := quickPeer(t, seen.handle)
	post(t, q, addr, "a")
	seen.mu.Lock()
	_ = seen.conns[0].Close()
	seen.mu.Unlock()
	if got := post(t, q, addr, "b"); got != "echo b" {
		t.Fatalf("answered %q after the kept connection was closed", got)
	}
	if n := seen.distinct(); n != 2 {
		t.Fatalf("the questions came on %d connections, want a second one after the first was closed", n)
	}
}

// TestQuickGivesUpAtItsDeadlineOnAPeerThatDoesNotAnswer: the answer of a
// peer that holds the question is not waited for past the deadline.
func TestQuickGivesUpAtItsDeadlineOnAPeerThatDoesNotAnswer(t *testing.T) {
	release := make(chan struct{})
	q, addr := quickPeer(t, func(*fasthttp.RequestCtx) { <-release })
	defer close(release) // only once Post returned: it cannot have waited for the peer
	if _, _, err := q.Post(addr, "/q", []byte("x"), time.Now().Add(50*time.Millisecond)); err == nil {
		t.Fatal("a question the peer never answered succeeded")
	}
}
