package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/store"
)

// runToExit runs the router binary to its end and returns its output and
// how long it took.
func runToExit(t *testing.T, bin string, args ...string) (string, time.Duration, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	began := time.Now()
	timer := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(began), err
}

// A busy or invalid --prometheus-port is refused at start, naming the
// flag. It used to hang the router for good (ignoring SIGTERM): had it
// hung, the 30 s kill above ends the process and the test fails on its
// output.
func TestServeRefusesABadPrometheusPortNamingTheFlag(t *testing.T) {
	router, _ := binaries(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, port, _ := net.SplitHostPort(busy.Addr().String())
	for _, p := range []string{port, "70000", "-3"} {
		out, took, err := runToExit(t, router, "serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0",
			"--gossip-bind", "127.0.0.1:0", "--data-dir", t.TempDir(), "--node-name", "e2e", "--prometheus-port", p)
		if err == nil || !strings.Contains(out, "--prometheus-port") || strings.Contains(out, "router ready") {
			t.Fatalf("--prometheus-port %s: exit %v after %s:\n%s", p, err, took, out)
		}
		t.Logf("--prometheus-port %s refused in %s", p, took.Round(time.Millisecond))
	}
}

// Checked before anything binds: 192.0.2.1 (TEST-NET-1) is not an address
// of this host, so even a broken check would bind nothing.
func TestServeRefusesAnExposedReplicaWithoutKeyAndTLS(t *testing.T) {
	router, _ := binaries(t)
	args := []string{"serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0", "--gossip-bind", "192.0.2.1:7946",
		"--data-dir", t.TempDir(), "--node-name", "e2e"}
	out, _, err := runToExit(t, router, args...)
	for _, want := range []string{"--gossip-key", "--cluster-tls-cert", "--gossip-bind 192.0.2.1:7946", "--insecure-cluster"} {
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("exit %v, output lacks %q:\n%s", err, want, out)
		}
	}
	// --insecure-cluster lets it past the check (and then fails to bind an
	// address this host does not have).
	out, _, _ = runToExit(t, router, append(args, "--insecure-cluster")...)
	if strings.Contains(out, "--cluster-tls-cert") || !strings.Contains(out, "192.0.2.1") {
		t.Fatalf("with --insecure-cluster:\n%s", out)
	}
}

func TestTLSInitWritesWhatServeReadsAndSIGHUPReloadsIt(t *testing.T) {
	router, _ := binaries(t)
	dir := filepath.Join(t.TempDir(), "tls")
	out, _, err := runToExit(t, router, "tls", "init", dir, "n1", "peer")
	if err != nil || !strings.Contains(out, "--cluster-tls-cert "+filepath.Join(dir, "n1.pem")) {
		t.Fatalf("tls init: %v\n%s", err, out)
	}
	files := link.NodeTLSFiles(dir, "n1")
	raftAddr := freeLoopbackAddr(t)
	p := start(t, router, "serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", raftAddr, "--gossip-bind", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--node-name", "n1", "--cluster-tls-cert", files.CertFile,
		"--cluster-tls-key", files.KeyFile, "--cluster-tls-ca", files.CAFile)
	p.await(t, `(router ready)`)
	peer := clientPresenting(t, link.NodeTLSFiles(dir, "peer"))
	first := servedSerial(t, raftAddr, peer)

	for _, f := range []string{files.CertFile, files.KeyFile} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if out, _, err := runToExit(t, router, "tls", "init", dir, "n1"); err != nil {
		t.Fatalf("tls init for a new n1 certificate: %v\n%s", err, out)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.await(t, `msg=(reloaded) parts="\[cluster TLS\]"`)
	if second := servedSerial(t, raftAddr, peer); second.Cmp(first) == 0 {
		t.Fatal("after SIGHUP the cluster port still presents the old certificate")
	}
}

// freeLoopbackAddr is a loopback address whose port was free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func clientPresenting(t *testing.T, files link.TLSFiles) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}
}

func servedSerial(t *testing.T, addr string, cfg *tls.Config) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

func TestKeyringCommandsStepEveryReplica(t *testing.T) {
	verifyNoLeaks(t)
	var mu sync.Mutex // the server's goroutine writes, the test reads
	var ops []string
	admin := admin.New(admin.Config{Registry: store.NewFSM().View,
		Apply: func(context.Context, store.Command) (store.Result, error) { return store.Result{}, nil },
		Keyring: func(_ context.Context, op adminapi.KeyringOp, key []byte) ([]adminapi.NodeKeyring, error) {
			mu.Lock()
			defer mu.Unlock()
			ops = append(ops, fmt.Sprintf("%s %s", op, key))
			nodes := []adminapi.NodeKeyring{{Node: "r1", Primary: "aaaa", Keys: []string{"aaaa", "bbbb"}}}
			if op == adminapi.KeyringRemove {
				nodes = append(nodes, adminapi.NodeKeyring{Node: "r2", Error: "unreachable"})
			}
			return nodes, nil
		}})
	addr := serveAdminOnly(t, admin)
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	if out := mustRun(t, "cluster", "keyring", "install", "--addr", addr, key); !strings.Contains(out, "r1") ||
		!strings.Contains(out, "aaaa,bbbb") {
		t.Fatalf("install printed %q", out)
	}
	mustRun(t, "cluster", "keyring", "use", "--addr", addr, key)
	mustRun(t, "cluster", "keyring", "list", "--addr", addr)
	out, err := run(t, "cluster", "keyring", "remove", "--addr", addr, key)
	if err == nil || !strings.Contains(err.Error(), "r2: unreachable") {
		t.Fatalf("a partial failure: %v\n%s", err, out)
	}
	want := []string{"install 0123456789abcdef", "use 0123456789abcdef", "list ", "remove 0123456789abcdef"}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(ops, "|") != strings.Join(want, "|") {
		t.Fatalf("operations %q, want %q", ops, want)
	}
}

// serveAdminOnly serves admin on loopback and returns its base URL.
func serveAdminOnly(t *testing.T, admin *admin.Admin) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{MaxIdleWorkerDuration: 10 * time.Millisecond,
		Handler: func(ctx *fasthttp.RequestCtx) { admin.Serve(ctx) }}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(); _ = ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// The API keys ride the same SIGHUP as the certificates.
func TestSIGHUPRereadsTheAPIKeys(t *testing.T) {
	router, _ := binaries(t)
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("old-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, router, "serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--node-name", "keys", "--api-keys", keys)
	base := "http://" + p.await(t, `router ready" addr=(\S+)`)
	status := func(key string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("new-key"); got != http.StatusUnauthorized {
		t.Fatalf("a key not in the file: %d, want 401", got)
	}
	if err := os.WriteFile(keys, []byte("new-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.await(t, `msg=(reloaded) parts="\[API keys\]"`)
	if got := status("new-key"); got == http.StatusUnauthorized {
		t.Fatal("the new key is refused after SIGHUP")
	}
	if got := status("old-key"); got != http.StatusUnauthorized {
		t.Fatalf("the old key: %d after SIGHUP, want 401", got)
	}
}
