// Package peers finds the public engines that `make peers` builds into a
// cache directory (llm-d-inference-sim, a vLLM simulator nobody here
// wrote), so that every engine-facing test can run against one of them as
// well as against workersim.
//
// A test that needs a peer calls Sim: where the binary is missing the test
// is skipped, saying how to build it, unless KVROUTER_REQUIRE_PEERS is set
// (CI sets it after `make peers`), where a missing peer fails the test
// rather than skipping it unseen.
package peers

import (
	"os"
	"path/filepath"
	"testing"
)

// SimEnv names the binary's path when it is not in the default cache.
const SimEnv = "KVROUTER_PEER_SIM"

// RequireEnv, when set to anything, makes a missing peer fail a test.
const RequireEnv = "KVROUTER_REQUIRE_PEERS"

// SimPath is where llm-d-inference-sim is: SimEnv, else the cache of
// scripts/peers.sh; "" when neither holds an executable.
func SimPath() string {
	for _, p := range []string{os.Getenv(SimEnv), defaultCache()} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// Sim is llm-d-inference-sim's path, or t skipped (failed under
// RequireEnv) when it has not been built.
func Sim(t testing.TB) string {
	t.Helper()
	p := SimPath()
	if p != "" {
		return p
	}
	const why = "llm-d-inference-sim is not built: `make peers` builds it (into ~/.cache/kvrouter/peers, or set " + SimEnv + ")"
	if os.Getenv(RequireEnv) != "" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}

// defaultCache is scripts/peers.sh's PEER_CACHE default.
func defaultCache() string {
	if p := os.Getenv("PEER_CACHE"); p != "" {
		return filepath.Join(p, "llm-d-inference-sim")
	}
	dir := os.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "kvrouter", "peers", "llm-d-inference-sim")
}
