package cluster

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestTheDebugListenerServesProfilesAndIsOffByDefault(t *testing.T) {
	off := startReplica(t, testConfig(t, t.TempDir()))
	if off.DebugAddr() != "" {
		t.Fatalf("a debug listener at %s without --debug-addr", off.DebugAddr())
	}
	cfg := testConfig(t, t.TempDir())
	cfg.DebugAddr = "127.0.0.1:0"
	r := startReplica(t, cfg)
	resp, err := http.Get("http://" + r.DebugAddr() + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("status %d body %.200q", resp.StatusCode, body)
	}
}

func TestADebugAddressOffLoopbackIsRefusedNamingTheFlag(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:6060", ":6060", "[::]:6060", "192.0.2.1:6060", "debug.example:6060", "6060"} {
		cfg := testConfig(t, t.TempDir())
		cfg.DebugAddr = addr
		var fe *FlagError
		if err := cfg.Validate(); !errors.As(err, &fe) || fe.Flag != "debug-addr" {
			t.Errorf("%q: %v, want a refusal naming --debug-addr", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:6060", "127.0.0.2:0", "[::1]:6060", "localhost:6060"} {
		cfg := testConfig(t, t.TempDir())
		cfg.DebugAddr = addr
		if err := cfg.Validate(); err != nil {
			t.Errorf("%q refused: %v", addr, err)
		}
	}
}
