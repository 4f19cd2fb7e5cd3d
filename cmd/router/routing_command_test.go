package main

import (
	"strings"
	"testing"
)

// TestClusterRoutingChangesTheTiersConfig runs a real replica and changes
// its routing config with `router cluster routing`: the change is read back,
// and one naming a block size the replica cannot hash with is refused.
func TestClusterRoutingChangesTheTiersConfig(t *testing.T) {
	router, workersim := binaries(t)
	_, worker := startWorkersim(t, workersim, "w1")
	base := startRouterProcess(t, router, "--worker-urls", worker, "--cache-threshold", "0.3")
	out := mustRun(t, "cluster", "routing", "--addr", base)
	if line(out, "cache threshold") != "cache threshold 0.3" || !strings.Contains(out, "(registry)") {
		t.Fatalf("routing before the change:\n%s", out)
	}
	out = mustRun(t, "cluster", "routing", "--addr", base, "--cache-threshold", "0.6", "--policy", "round_robin")
	if line(out, "cache threshold") != "cache threshold 0.6" || line(out, "policy") != "policy round_robin" {
		t.Fatalf("routing after the change:\n%s", out)
	}
	if out := mustRun(t, "cluster", "routing", "--addr", base, "--json"); !strings.Contains(out, `"cache_threshold":0.6`) {
		t.Fatalf("the change is not what the replica holds: %s", out)
	}
	if _, err := run(t, "cluster", "routing", "--addr", base, "--miss-placement", "nowhere"); err == nil || !strings.Contains(err.Error(), "miss placement") {
		t.Fatalf("an unknown miss placement: %v, want a 400 naming it", err)
	}
}

// line is the line of out that starts with prefix, its blanks squeezed.
func line(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return ""
}
