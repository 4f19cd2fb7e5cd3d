package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/cluster/raftnode/raftnodetest"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/proxy"
	"github.com/kvrouter/kvrouter/store"
)

// echoWorker is a loopback worker that answers every completion with its name.
func echoWorker(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{MaxIdleWorkerDuration: time.Millisecond, Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("x-worker-id", name)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"choices":[{"text":"ok"}]}`)
	}}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	// Closing ln too ends a Serve that Shutdown came too early for.
	t.Cleanup(func() { _ = srv.Shutdown(); _ = ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}

func testConfig(t *testing.T, dir string, seeds ...string) Config {
	t.Helper()
	cfg := Config{HTTPAddr: "127.0.0.1:0", NodeName: "n1", DataDir: dir, RaftBind: "127.0.0.1:0",
		RaftAdvertise: "127.0.0.1:0", GossipBind: "127.0.0.1:0", GossipAdvertise: "127.0.0.1:0",
		BootstrapExpect: 1, Routing: DefaultRouting(), Proxy: proxy.DefaultConfig(),
		RaftTimings: raftnodetest.LoopbackTimings, Logger: slog.New(slog.DiscardHandler)}
	cfg.Health = health.DefaultConfig()
	for _, s := range seeds {
		cfg.Seeds = append(cfg.Seeds, Seed{URL: s, Role: "regular"})
	}
	return cfg
}

func startReplica(t *testing.T, cfg Config) *Replica {
	t.Helper()
	r, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

func TestReplicaRoutesToItsSeededWorkers(t *testing.T) {
	r := startReplica(t, testConfig(t, t.TempDir(), echoWorker(t, "w1")))
	testwait.Eventually(t, testDeadline, func() bool {
		resp, err := http.Get("http://" + r.HTTPAddr() + "/readiness")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "the replica to be ready")
	resp, err := http.Post("http://"+r.HTTPAddr()+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != 200 || resp.Header.Get("x-worker-id") != "w1" {
		t.Fatalf("status %d from %q: %s", resp.StatusCode, resp.Header.Get("x-worker-id"), body)
	}
}

// TestRegistrySurvivesARestart: the lone replica's registry lives in Raft on
// disk, so a restart keeps workers added at run time and their ids.
func TestRegistrySurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, echoWorker(t, "w1"))
	r, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	added, err := r.ApplyRegistry(context.Background(), store.NewAddWorker(store.AddWorker{URL: echoWorker(t, "w2")}))
	if err != nil || added.Err != nil {
		t.Fatalf("add: %v %v", err, added.Err)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := startReplica(t, cfg) // seeding w1 again is idempotent
	reg := again.fsm.View()
	if reg.Len() != 2 {
		t.Fatalf("%d workers after restart, want 2", reg.Len())
	}
	if w, ok := reg.Worker(added.ID); !ok || !strings.Contains(w.URL, "127.0.0.1") {
		t.Fatalf("worker %d lost its id across the restart", added.ID)
	}
}

func TestRestartWithADifferentBlockSizeIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, echoWorker(t, "w1"))
	r, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Stop(context.Background())
	cfg.Routing.BlockSize = 128
	_, err = Start(context.Background(), cfg)
	if !errors.Is(err, store.ErrConfigMismatch) || !strings.Contains(err.Error(), "block") {
		t.Fatalf("err = %v, want a config mismatch naming the block size", err)
	}
}

func TestBadConfigIsRefusedNamingTheFlag(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Routing.Thresholds.BalanceRel = 0.5
	_, err := Start(context.Background(), cfg)
	var fe *FlagError
	if !errors.As(err, &fe) || fe.Flag != "balance-rel-threshold" {
		t.Fatalf("err = %v", err)
	}
}
