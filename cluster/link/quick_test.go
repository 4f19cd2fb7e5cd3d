package link

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// questionPeer is a cluster port answering the peers' HTTP with h, and a
// Quick that dials it.
func questionPeer(t testing.TB, h fasthttp.RequestHandler) (*Quick, string) {
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
	q, addr := questionPeer(t, seen.handle)
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
	q, addr := questionPeer(t, seen.handle)
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
	q, addr := questionPeer(t, func(*fasthttp.RequestCtx) { <-release })
	defer close(release) // only once Post returned: it cannot have waited for the peer
	if _, _, err := q.Post(addr, "/q", []byte("x"), time.Now().Add(50*time.Millisecond)); err == nil {
		t.Fatal("a question the peer never answered succeeded")
	}
}

// TestQuickHoldsAFewConnectionsToAPeerInABurst: 32 questions at once reach
// the peer over maxQuickConns connections, the others waiting for one to
// be free, not over a connection each: a peer closes, unread, what one
// address opens past its bound of connections in their handshake.
func TestQuickHoldsAFewConnectionsToAPeerInABurst(t *testing.T) {
	seen := &connsSeen{}
	var inside atomic.Int32
	full := make(chan struct{})
	q, addr := questionPeer(t, func(ctx *fasthttp.RequestCtx) {
		if inside.Add(1) == maxQuickConns {
			close(full) // as many questions in hand as connections allowed
		}
		<-full
		seen.handle(ctx)
	})
	var waited atomic.Int32
	q.Waited = func(time.Duration) { waited.Add(1) }
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, got, err := q.Post(addr, "/q", fmt.Append(nil, i), time.Now().Add(10*time.Second)); err != nil || status != fasthttp.StatusOK {
				t.Errorf("question %d: %d %q %v", i, status, got, err)
			}
		}()
	}
	wg.Wait()
	if n := seen.distinct(); n != maxQuickConns {
		t.Fatalf("32 questions at once came on %d connections, want %d", n, maxQuickConns)
	}
	// No connection is idle before maxQuickConns questions are in hand, so
	// at least those found none free at once.
	if n := waited.Load(); n < maxQuickConns {
		t.Errorf("Waited heard %d questions, want at least %d", n, maxQuickConns)
	}
}

// TestQuickAsksAgainWhenANewConnectionIsClosedUnanswered: a peer that
// closes a new connection without answering (it did not admit it) costs
// the question a second connection, not an error.
func TestQuickAsksAgainWhenANewConnectionIsClosedUnanswered(t *testing.T) {
	seen := &connsSeen{}
	var questions atomic.Int32
	q, addr := questionPeer(t, func(ctx *fasthttp.RequestCtx) {
		if questions.Add(1) == 1 {
			_ = ctx.Conn().Close()
			return
		}
		seen.handle(ctx)
	})
	if got := post(t, q, addr, "a"); got != "echo a" {
		t.Fatalf("answered %q after the first connection was closed unanswered", got)
	}
}
