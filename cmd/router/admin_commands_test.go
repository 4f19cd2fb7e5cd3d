package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/urfave/cli/v2"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/admin/admintest"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/store"
)

// verifyNoLeaks is per test rather than a TestMain, so this file does not
// fight over TestMain with other tests of the package.
func verifyNoLeaks(t *testing.T) {
	opts := []goleak.Option{goleak.IgnoreCurrent(),
		// fasthttp's process-wide Date refresher, started once, never stopped.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1")}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// fakeReplica is a loopback replica front: the real admin API over an FSM
// that applies writes directly (a one-node cluster without the waiting),
// plus /readiness.
type fakeReplica struct {
	addr  string
	fsm   *store.FSM
	ready atomic.Bool

	mu    sync.Mutex
	index uint64
}

func (f *fakeReplica) apply(_ context.Context, cmd store.Command) (store.Result, error) {
	data, err := cmd.Encode()
	if err != nil {
		return store.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	res := f.fsm.Apply(&raft.Log{Index: f.index, Type: raft.LogCommand, Data: data}).(store.Result)
	return res, res.Err
}

func startReplica(t *testing.T, token string, status func() any) *fakeReplica {
	t.Helper()
	verifyNoLeaks(t)
	f := &fakeReplica{fsm: store.NewFSM()}
	a := admin.New(admin.Config{Token: token, Registry: f.fsm.View, Apply: f.apply, Status: status})
	f.addr = admintest.Serve(t, withReadiness{a, f}).URL()
	return f
}

// withReadiness serves the admin API and the replica's /readiness: ready
// while f says so, 503 otherwise and for every other path.
type withReadiness struct {
	admin *admin.Admin
	f     *fakeReplica
}

func (h withReadiness) Serve(ctx *fasthttp.RequestCtx) bool {
	if h.admin.Serve(ctx) {
		return true
	}
	if string(ctx.Path()) == "/readiness" && h.f.ready.Load() {
		ctx.SetBodyString("ready")
		return true
	}
	ctx.Error("not ready", fasthttp.StatusServiceUnavailable)
	return true
}

// run runs the CLI with args and returns what it printed.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := &cli.App{Name: "router", Commands: adminCommands(), Writer: &out, ErrWriter: &out}
	err := app.Run(append([]string{"router"}, args...))
	return out.String(), err
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run(t, args...)
	if err != nil {
		t.Fatalf("router %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func TestWorkersCommandsDriveTheRegistry(t *testing.T) {
	r := startReplica(t, "", nil)
	out := mustRun(t, "workers", "add", "--addr", r.addr, "--url", "http://W1:8000/", "--role", "prefill",
		"--model", "m", "--bootstrap-port", "8998", "--label", "zone=a")
	if out != "added worker 1 http://w1:8000 (prefill)\n" {
		t.Fatalf("add printed %q", out)
	}
	if out := mustRun(t, "workers", "add", "--addr", r.addr, "--url", "http://w1:8000"); !strings.Contains(out, "already registered") {
		t.Fatalf("second add printed %q", out)
	}
	mustRun(t, "workers", "add", "--addr", r.addr, "--url", "http://w2:8000")

	out = mustRun(t, "workers", "list", "--addr", r.addr)
	for _, want := range []string{"ID", "http://w1:8000", "prefill", "zone=a", "http://w2:8000", "regular"} {
		if !strings.Contains(out, want) {
			t.Fatalf("list output lacks %q:\n%s", want, out)
		}
	}

	mustRun(t, "workers", "drain", "--addr", r.addr, "HTTP://w2:8000")
	if w, _ := r.fsm.View().Worker(2); w.State != store.StateDraining {
		t.Fatalf("drain by URL left worker 2 %q", w.State)
	}
	mustRun(t, "workers", "activate", "--addr", r.addr, "2")
	if w, _ := r.fsm.View().Worker(2); w.State != store.StateActive {
		t.Fatalf("activate left worker 2 %q", w.State)
	}
	if out := mustRun(t, "workers", "remove", "--addr", r.addr, "1"); out != "removed worker 1 http://w1:8000\n" {
		t.Fatalf("remove printed %q", out)
	}
	if _, ok := r.fsm.View().Worker(1); ok {
		t.Fatal("worker 1 still registered after remove")
	}
}

func TestWorkersListJSONIsTheServersReply(t *testing.T) {
	r := startReplica(t, "", nil)
	mustRun(t, "workers", "add", "--addr", r.addr, "--url", "http://w1:8000")
	out := mustRun(t, "workers", "list", "--json", "--addr", r.addr)
	var list struct{ Workers []store.Worker }
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Workers) != 1 || list.Workers[0].URL != "http://w1:8000" {
		t.Fatalf("--json printed %q (%v)", out, err)
	}
}

func TestWorkersCommandsFailWithTheServersMessage(t *testing.T) {
	r := startReplica(t, "", nil)
	cases := []struct {
		args    []string
		mention string
	}{
		{[]string{"workers", "add", "--addr", r.addr, "--url", "ftp://w:1"}, "invalid url"},
		{[]string{"workers", "add", "--addr", r.addr, "--url", "http://w:1", "--role", "boss"}, "invalid role"},
		{[]string{"workers", "remove", "--addr", r.addr, "42"}, "no worker with id 42"},
		{[]string{"workers", "drain", "--addr", r.addr, "http://unknown:1"}, "no worker is registered"},
		{[]string{"workers", "add", "--addr", r.addr, "--url", "http://w:1", "--label", "novalue"}, "--label"},
		{[]string{"workers", "drain", "--addr", r.addr}, "worker id or URL"},
	}
	for _, tc := range cases {
		if _, err := run(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("router %s: err = %v, want it to mention %q", strings.Join(tc.args, " "), err, tc.mention)
		}
	}
}

func TestAdminTokenComesFromTheFlagOrTheEnvironment(t *testing.T) {
	r := startReplica(t, "s3cret", nil)
	if _, err := run(t, "workers", "list", "--addr", r.addr); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without a token: err = %v, want a 401", err)
	}
	mustRun(t, "workers", "list", "--addr", r.addr, "--admin-token", "s3cret")
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "workers", "list", "--addr", r.addr, "--admin-token-file", file)
	if _, err := run(t, "workers", "list", "--addr", r.addr, "--admin-token-file", file+".missing"); err == nil ||
		!strings.Contains(err.Error(), "--admin-token-file") {
		t.Fatalf("a missing token file: err = %v, want one naming --admin-token-file", err)
	}
	t.Setenv("ROUTER_ADMIN_TOKEN", "s3cret")
	t.Setenv("ROUTER_ADDR", r.addr)
	mustRun(t, "workers", "list")
}

func TestClusterStatusPrintsLeaderTermVotersAndPeers(t *testing.T) {
	st := adminapi.Status{Node: "n1", Leader: "n2", Term: 7, Voters: []string{"n1", "n2", "n3"},
		Nonvoters: []string{"n4"}, Workers: 5,
		Members: []adminapi.Member{{Name: "n1", Address: "10.0.0.1:7946", State: "alive"}},
		Peers:   []adminapi.PeerStatus{{Name: "n2", LastReportAge: 0.25}, {Name: "n3", LastReportAge: -1}}}
	r := startReplica(t, "", func() any { return st })
	out := mustRun(t, "cluster", "status", "--addr", r.addr)
	for _, want := range []string{"n2", "7", "n1, n2, n3", "n4", "10.0.0.1:7946", "250ms ago", "never"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status output lacks %q:\n%s", want, out)
		}
	}
	raw := mustRun(t, "cluster", "status", "--json", "--addr", r.addr)
	var back adminapi.Status
	if err := json.Unmarshal([]byte(raw), &back); err != nil || back.Term != 7 || back.Leader != "n2" {
		t.Fatalf("--json printed %q (%v)", raw, err)
	}
}

func TestHealthcheckExitsZeroOnlyWhenReady(t *testing.T) {
	r := startReplica(t, "", nil)
	if _, err := run(t, "healthcheck", "--addr", r.addr); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("not ready: err = %v, want a 503 failure", err)
	}
	r.ready.Store(true)
	if _, err := run(t, "healthcheck", "--addr", strings.TrimPrefix(r.addr, "http://")); err != nil {
		t.Fatalf("ready: %v", err)
	}
}

func TestHealthcheckFailsWhenNothingListens(t *testing.T) {
	verifyNoLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := run(t, "healthcheck", "--addr", addr); err == nil {
		t.Fatal("healthcheck of a closed port succeeded")
	}
}
