package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// upgradeDeadline bounds each wait of an upgrade step: a replica's stop,
// its start on a replayed log, the tier's convergence.
const upgradeDeadline = 60 * time.Second

// TestRollingUpgradeAndRollback runs a tier of three real router processes
// of the previous release (the newest in CHANGELOG.md before this commit,
// built once from its tree) in front of workersims, under chat traffic to
// every replica, and replaces them one at a time with this build, then one
// at a time back. After each step: no request failed but on the replica
// being replaced while it was down, each answered by another replica (no
// turn of a conversation lost); no replica counted a gossip decode
// error (or, of this build, a message it does not know); every replica
// hears every other's load reports; and the registry is whole everywhere,
// a worker added through the replica just replaced included (Raft between
// the two builds, whichever leads).
//
// It runs with KVROUTER_UPGRADE=1 (make upgrade, which CI runs): it builds
// the previous release once per commit, then takes a minute or two.
func TestRollingUpgradeAndRollback(t *testing.T) {
	if os.Getenv("KVROUTER_UPGRADE") != "1" {
		t.Skip("set KVROUTER_UPGRADE=1 (make upgrade) to upgrade and roll back a tier of real replicas")
	}
	prev := previousRelease(t)
	oldBin := releaseRouter(t, prev)
	newBin, workersim := binaries(t)
	var urls []string
	for i := range 3 {
		_, u := startWorkersim(t, workersim, fmt.Sprint("w", i))
		urls = append(urls, u)
	}
	tr := newUpgradeTier(t, oldBin, urls)
	load := startChatTraffic(t, tr.bases(), 6)
	tr.checkStep(t, load, "the tier of "+prev.version)
	for i := range tr.replicas {
		tr.replace(t, load, i, newBin, fmt.Sprintf("upgrading %s to this build", tr.replicas[i].name))
	}
	for _, i := range []int{2, 1, 0} {
		tr.replace(t, load, i, oldBin, fmt.Sprintf("rolling %s back to %s", tr.replicas[i].name, prev.version))
	}
	load.stop()
	t.Logf("%d requests answered; %d tries failed, each on a replica while it was being replaced, and answered by another",
		load.ok.Load(), load.failedCount())
}

// replace stops replica i, starts bin on its data dir and addresses, sends
// a registry write through it, and checks the tier once it is back.
func (tr *upgradeTier) replace(t *testing.T, load *chatTraffic, i int, bin, what string) {
	t.Helper()
	start := time.Now()
	load.replacing(i)
	tr.stop(t, i)
	tr.start(t, i, bin)
	tr.waitReady(t, i)
	tr.addWorker(t, i)
	load.replacing(-1)
	tr.checkStep(t, load, what)
	t.Logf("%s: %v", what, time.Since(start).Round(100*time.Millisecond))
}

// checkStep checks the tier after a step: failures only where allowed,
// no decode error, every report heard, the registry the same everywhere.
func (tr *upgradeTier) checkStep(t *testing.T, load *chatTraffic, what string) {
	t.Helper()
	load.waitAnswered(t, 20*len(tr.replicas), what)
	if bad := load.disallowedFailures(); len(bad) > 0 {
		t.Fatalf("%s: requests failed on replicas that were up: %s", what, strings.Join(bad, "; "))
	}
	for _, r := range tr.replicas {
		base := r.base()
		if n := metric(t, base, "vllm_router_cluster_gossip_decode_errors_total"); n != 0 {
			t.Fatalf("%s: %s counted %v gossip decode errors", what, r.name, n)
		}
		if n := metric(t, base, "vllm_router_cluster_gossip_unknown_messages_total"); n > 0 {
			t.Fatalf("%s: %s counted %v gossip messages it does not know", what, r.name, n)
		}
	}
	tr.waitConverged(t, what)
}

// waitConverged waits until every replica lists every worker the registry
// should hold, and hears every other replica's load reports.
func (tr *upgradeTier) waitConverged(t *testing.T, what string) {
	t.Helper()
	want := slices.Sorted(slices.Values(tr.registered))
	for _, r := range tr.replicas {
		testwait.EventuallyNil(t, upgradeDeadline, func() error {
			if got := registryURLs(r.base()); !slices.Equal(got, want) {
				return fmt.Errorf("%s lists %v, want %v", r.name, got, want)
			}
			if heard := peersHeard(r.base()); heard != len(tr.replicas)-1 {
				return fmt.Errorf("%s hears the load reports of %d peers, want %d", r.name, heard, len(tr.replicas)-1)
			}
			return nil
		}, "%s: the registry whole and the reports heard everywhere", what)
	}
}
