package cluster

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/loadsync"
)

// A --prometheus-port in use used to make Start hang for good: the
// listener was bound after the proxy had started serving, and stopping a
// fasthttp server whose Serve has not registered its listener yet does
// nothing, so Stop waited for that Serve forever (and the command line,
// having taken SIGTERM for itself, ignored it). Now the port is bound first
// and refused at once; had Start hung, the test would time out.
func TestAPrometheusPortInUseIsRefusedNamingTheFlag(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	cfg := testConfig(t, dir, echoWorker(t, "w1"))
	cfg.MetricsAddr = busy.Addr().String()
	r, err := Start(context.Background(), cfg)
	if err == nil {
		_ = r.Stop(context.Background())
		t.Fatal("Start succeeded on a port in use")
	}
	if !strings.Contains(err.Error(), "--prometheus-port") {
		t.Fatalf("err = %v, want it to name --prometheus-port", err)
	}
	// Refused before anything else started: Raft made nothing on disk.
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("raft.db: %v; want the port refused before Raft opens", err)
	}
}

// TestServeUntilEndsWhenStoppedBeforeServing pins the cause: a stop that
// comes before Serve registered its listener must still end Serve.
func TestServeUntilEndsWhenStoppedBeforeServing(t *testing.T) {
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			link.ServeUntil(ctx, &fasthttp.Server{Handler: func(*fasthttp.RequestCtx) {}, MaxIdleWorkerDuration: time.Millisecond}, ln)
		}()
		select {
		case <-done:
		case <-time.After(testDeadline):
			t.Fatal("serveUntil did not return after its context ended")
		}
	}
}

// TestStartGivesUpWhenItsContextEnds: a signal during a --join that nobody
// answers yet ends Start, instead of waiting out the join timeout.
func TestStartGivesUpWhenItsContextEnds(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Join = []string{"127.0.0.1:1"} // nobody there
	cfg.BootstrapExpect = 2
	cfg.JoinTimeout = 10 * testDeadline
	retrying := make(chan struct{}, 1)
	cfg.Logger = slog.New(&noticeHandler{msg: "no --join address answers yet", seen: retrying})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		r, err := Start(ctx, cfg)
		if err == nil {
			_ = r.Stop(context.Background())
		}
		errc <- err
	}()
	<-retrying // Start is in the join loop
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Start = %v, want context.Canceled", err)
		}
	case <-time.After(testDeadline):
		t.Fatal("Start kept trying --join after its context ended")
	}
}

// noticeHandler is a slog handler that signals seen when a record's message
// contains msg, and drops everything.
type noticeHandler struct {
	msg  string
	seen chan struct{}
}

func (h *noticeHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *noticeHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *noticeHandler) WithGroup(string) slog.Handler            { return h }

func (h *noticeHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		select {
		case h.seen <- struct{}{}:
		default:
		}
	}
	return nil
}

// A replica with a wrong gossip key used to log "no --join address answers
// yet" until the join timeout; now the first answer says what is wrong.
func TestAWrongGossipKeyIsReportedAtOnce(t *testing.T) {
	k1, k2 := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	cases := map[string]struct{ cluster, joiner []byte }{
		"another key":                 {k1, k2},
		"no key, the cluster has one": {k1, nil},
		"a key, the cluster has none": {nil, k1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newTestCluster(t, 1)
			first := c.start(c.config("r0", 1, nil, withKey(tc.cluster)))
			cfg := c.config("r1", 1, []string{first.GossipAddr()}, withKey(tc.joiner))
			cfg.JoinTimeout = 3 * testDeadline // the old code would have retried this long
			_, err := Start(context.Background(), cfg)
			if !errors.Is(err, loadsync.ErrGossipKey) || !strings.Contains(err.Error(), "--gossip-key") {
				t.Fatalf("Start = %v, want ErrGossipKey naming --gossip-key", err)
			}
		})
	}
}
