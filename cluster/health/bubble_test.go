package health

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// pipeWorker is a Dialer whose connections go to an in-memory worker whose
// health endpoint answers 200 and whose engine says nothing (every other path
// is a 404), as a hung engine's might: no socket, so Run's loops can
// run inside a synctest bubble, where the Monitor's clock.RealClock and Run's
// tickers both read the bubble's virtual time.
func pipeWorker() *workerurl.Dialer {
	return &workerurl.Dialer{Connect: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go answerAll(server)
		return client, nil
	}}
}

// answerAll answers each request read from conn until the client closes it:
// 200 on /health, 404 elsewhere.
func answerAll(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		status := "404 Not Found"
		if req.URL.Path == "/health" {
			status = "200 OK"
		}
		if _, err := io.WriteString(conn, "HTTP/1.1 "+status+"\r\nContent-Length: 0\r\n\r\n"); err != nil {
			return
		}
	}
}

// TestRunCutsASilentRequestOnItsOwnTicks runs Run's check and eval loops on a
// synctest bubble's clock: nobody calls Tick, and an attempt that hears
// nothing is cut by the eval loop once WedgeTimeout has passed, not before.
func TestRunCutsASilentRequestOnItsOwnTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := wedgeConfig()
		cfg.Dialer = pipeWorker()
		m, err := New(cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		if err := m.SetWorkers([]Target{{ID: 1, URL: "http://127.0.0.1:9"}}); err != nil {
			t.Fatal(err)
		}
		if err := m.AwaitProbed(ctx, 1); err != nil {
			t.Fatal(err)
		}
		a := begin(t, m, 1)
		defer a.End(OutcomeCanceled)
		time.Sleep(cfg.WedgeTimeout - time.Second) // moves the bubble's clock: no real time passes
		synctest.Wait()
		if isClosed(a.Stuck()) {
			t.Fatalf("cut %v into a %v wedge timeout", cfg.WedgeTimeout-time.Second, cfg.WedgeTimeout)
		}
		time.Sleep(time.Second + 2*cfg.EvalInterval) // the bubble's clock again
		synctest.Wait()
		if !isClosed(a.Stuck()) || m.Eligible(1) {
			t.Fatalf("not cut (eligible %v) %v after the silent request began, with a %v wedge timeout",
				m.Eligible(1), cfg.WedgeTimeout+2*cfg.EvalInterval, cfg.WedgeTimeout)
		}
	})
}
