package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A value of --api-keys that names a file is that file's keys or a refusal:
// never the path itself as the one key.
func TestAnAPIKeysPathThatIsNoFileIsRefusedNamingTheFlag(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	if err := os.WriteFile(file, []byte("alpha\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, value := range []string{filepath.Join(dir, "missing"), "@" + filepath.Join(dir, "missing"), "@missing-here",
		"etc/kvrouter/keys", dir} {
		cfg, err := parseServe(t, "--api-keys", value)
		if err == nil || !strings.Contains(err.Error(), "--api-keys") {
			t.Errorf("--api-keys %s: keys %q, err %v; want a refusal naming --api-keys", value, cfg.Proxy.APIKeys, err)
		}
	}
	for _, value := range []string{file, "@" + file} {
		cfg, err := parseServe(t, "--api-keys", value)
		if err != nil || strings.Join(cfg.Proxy.APIKeys, ",") != "alpha" {
			t.Errorf("--api-keys %s: keys %q, err %v; want the file's", value, cfg.Proxy.APIKeys, err)
		}
	}
}

// The process exits non-zero, naming the flag, when the keys file is not
// there; after SIGHUP with the file gone, the last good keys stay and an
// ERROR says why.
func TestAMissingAPIKeysFileStopsTheStartAndKeepsTheKeysAtSIGHUP(t *testing.T) {
	router, _ := binaries(t)
	keys := filepath.Join(t.TempDir(), "keys")
	base := []string{"serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--node-name", "keys", "--api-keys", keys}
	out, _, err := runToExit(t, router, base...)
	if err == nil || !strings.Contains(out, "--api-keys") || strings.Contains(out, "router ready") {
		t.Fatalf("a missing keys file: exit %v\n%s", err, out)
	}
	if err := os.WriteFile(keys, []byte("real-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, router, base...)
	addr := "http://" + p.await(t, `router ready" addr=(\S+)`)
	status := func(key string) int {
		req, _ := http.NewRequest(http.MethodGet, addr+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if err := os.Rename(keys, keys+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.await(t, `(level=ERROR msg="reload failed.*--api-keys)`)
	if got := status("real-key"); got == http.StatusUnauthorized {
		t.Fatal("the last good key is refused after a SIGHUP that found no file")
	}
	if got := status(keys); got != http.StatusUnauthorized {
		t.Fatalf("the path as a key: %d, want 401", got)
	}
}

// The admin token and the key sent to workers may come from files (or the
// environment), so that they need not show in ps.
func TestSecretsComeFromFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	token, key := write("token", "t0ken\n"), write("key", " w-key \n")
	cfg, err := parseServe(t, "--admin-token-file", token, "--api-key-file", key)
	if err != nil || cfg.AdminToken != "t0ken" || cfg.Proxy.APIKey != "w-key" || cfg.Health.APIKey != "w-key" {
		t.Fatalf("from files: %v token %q key %q/%q", err, cfg.AdminToken, cfg.Proxy.APIKey, cfg.Health.APIKey)
	}
	t.Setenv("ROUTER_ADMIN_TOKEN", "from-env")
	if cfg, err := parseServe(t); err != nil || cfg.AdminToken != "from-env" {
		t.Fatalf("from the environment: %v %q", err, cfg.AdminToken)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--admin-token-file", filepath.Join(dir, "none")}, "--admin-token-file"},
		{[]string{"--api-key-file", write("empty", "\n")}, "--api-key-file"},
		{[]string{"--api-key-file", write("two", "a\nb\n")}, "--api-key-file"},
		{[]string{"--api-key-file", key, "--api-key", "inline"}, "--api-key"},
		{[]string{"--admin-token-file", token}, "--admin-token"}, // ROUTER_ADMIN_TOKEN is set too
	} {
		if _, err := parseServe(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: %v, want a refusal naming %s", tc.args, err, tc.flag)
		}
	}
}
