package edge

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/leaktest"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// failOnceListener fails its first Accept for lack of descriptors, then
// waits, as a listener does whose queued clients gave up meanwhile.
type failOnceListener struct {
	net.Listener
	calls atomic.Int32
	done  chan struct{}
}

func (l *failOnceListener) Accept() (net.Conn, error) {
	if l.calls.Add(1) == 1 {
		return nil, &net.OpError{Op: "accept", Err: os.NewSyscallError("accept", syscall.EMFILE)}
	}
	<-l.done
	return nil, net.ErrClosed
}

// TestAListenerThatStopsFailingIsAcceptingWithoutANewClient: after a
// failure for lack of descriptors, the retry finds them free but no client
// waiting; readiness must not stay at 503 until a new client happens by.
func TestAListenerThatStopsFailingIsAcceptingWithoutANewClient(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	fl := &failOnceListener{Listener: inner, done: make(chan struct{})}
	l := NewListener(fl, 0, slog.New(slog.DiscardHandler))
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		accepted <- err
	}()
	testwait.Eventually(t, 5*time.Second, func() bool { return fl.calls.Load() >= 2 }, "the retry after the failure")
	if l.Accepting() {
		t.Fatal("accepting right after a failure for lack of descriptors")
	}
	testwait.Eventually(t, 4*maxAcceptBackoff, l.Accepting, "accepting again with no new client")
	close(fl.done)
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept ended with %v, want net.ErrClosed", err)
	}
}
