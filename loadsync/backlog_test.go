package loadsync

import (
	"math"
	"testing"
	"time"
)

// backlogReplica is a replica that also reports its prefill backlogs.
type backlogReplica struct {
	*replica
	backlog       *localLoads
	remoteBacklog *remoteTable
}

func newBacklogReplica(t *testing.T, origin string) backlogReplica {
	t.Helper()
	own, remote := newLocalLoads(), newRemoteTable()
	r := newReplica(t, origin, func(c *Config) {
		c.LocalBacklogs, c.OnRemoteBacklog = own.read, remote.store
	})
	return backlogReplica{replica: r, backlog: own, remoteBacklog: remote}
}

// TestPeersHearEachOthersPrefillBacklogs: every replica's backlog on a
// worker is summed at its peers, apart from the counts of requests, and
// a backlog that drains to nothing is heard within the flush interval
// while the count of requests stays the same (a first token came). The
// backlogs here are whole blocks of backlogUnit, which both encodings
// carry exactly.
func TestPeersHearEachOthersPrefillBacklogs(t *testing.T) {
	bothEncodings(t, func(t *testing.T, legacy bool) {
		a, b, c := newBacklogReplica(t, "a"), newBacklogReplica(t, "b"), newBacklogReplica(t, "c")
		if legacy {
			asLegacy(c.replica, a.replica)
			asLegacy(c.replica, b.replica)
		}
		a.local.set(1, 1)
		a.backlog.set(1, 36*backlogUnit)
		b.local.set(1, 1)
		b.backlog.set(1, 2*backlogUnit)
		deliver(t, a.st.Tick(t0), t0, b.replica, c.replica)
		deliver(t, b.st.Tick(t0), t0, a.replica, c.replica)
		if got := c.remoteBacklog.get(1); got != 38*backlogUnit {
			t.Fatalf("c hears a backlog of %d on worker 1, want %d + %d", got, 36*backlogUnit, 2*backlogUnit)
		}
		if got := c.remote.get(1); got != 2 {
			t.Fatalf("c hears %d requests on worker 1, want 2: backlogs are not counts", got)
		}
		if got := a.remoteBacklog.get(1); got != 2*backlogUnit {
			t.Fatalf("a hears %d, want b's %d and not its own", got, 2*backlogUnit)
		}

		a.backlog.set(1, 0) // a's request got its first token, and is decoding
		at := t0.Add(DefaultLoadFlushInterval)
		deliver(t, a.st.Tick(at), at, c.replica)
		if got := c.remoteBacklog.get(1); got != 2*backlogUnit {
			t.Fatalf("c hears %d one flush interval after a's backlog drained, want b's %d", got, 2*backlogUnit)
		}
		if got := c.remote.get(1); got != 2 {
			t.Fatalf("c hears %d requests, want the 2 still in flight", got)
		}
	})
}

// TestABacklogIsHeardToTheBlock: a report carries a backlog in blocks of
// backlogUnit bytes, rounded up, so that any backlog shows and a change
// within a block sends nothing; the older types carried bytes.
func TestABacklogIsHeardToTheBlock(t *testing.T) {
	a, b := newBacklogReplica(t, "a"), newBacklogReplica(t, "b")
	a.backlog.set(1, 1)
	a.backlog.set(2, 9000)
	deliver(t, a.st.Tick(t0), t0, b.replica)
	if got := b.remoteBacklog.get(1); got != backlogUnit {
		t.Fatalf("a backlog of 1 byte is heard as %d, want one block (%d)", got, backlogUnit)
	}
	if got, want := b.remoteBacklog.get(2), int64(36*backlogUnit); got != want {
		t.Fatalf("a backlog of 9000 bytes is heard as %d, want %d", got, want)
	}
	a.backlog.set(2, 9100) // the same block
	if pkts := a.st.Tick(t0.Add(DefaultLoadFlushInterval)); len(pkts) != 0 {
		t.Fatalf("a change within a block made a report of %d packets, want none before the regular one", len(pkts))
	}
}

// TestABacklogIsRefreshedAndExpiresWithItsOrigin: an unchanged backlog is
// sent again every LoadInterval, so a peer keeps it while the origin
// lives, and drops it with the origin's loads at the TTL or at Forget.
func TestABacklogIsRefreshedAndExpiresWithItsOrigin(t *testing.T) {
	a, b := newBacklogReplica(t, "a"), newBacklogReplica(t, "b")
	a.backlog.set(2, 3*backlogUnit)
	now := t0
	deliver(t, a.st.Tick(now), now, b.replica)
	for range 3 * int(DefaultLoadTTL/DefaultLoadInterval) {
		now = now.Add(DefaultLoadInterval)
		deliver(t, a.st.Tick(now), now, b.replica)
		b.st.Tick(now)
	}
	if got := b.remoteBacklog.get(2); got != 3*backlogUnit {
		t.Fatalf("b holds %d after three TTLs of refreshes, want %d", got, 3*backlogUnit)
	}
	b.st.Tick(now.Add(DefaultLoadTTL + time.Nanosecond))
	if got := b.remoteBacklog.get(2); got != 0 {
		t.Fatalf("b holds %d after a TTL of silence, want 0", got)
	}
	now = now.Add(2 * DefaultLoadTTL)
	deliver(t, a.st.Tick(now), now, b.replica)
	if got := b.remoteBacklog.get(2); got != 3*backlogUnit {
		t.Fatalf("b holds %d after a spoke again, want %d", got, 3*backlogUnit)
	}
	b.st.Forget("a")
	if got := b.remoteBacklog.get(2); got != 0 {
		t.Fatalf("b holds %d after forgetting a, want 0", got)
	}
}

// TestABacklogReportIsRefusedPastItsBound: a forged backlog beyond any
// engine's is a malformed packet, not a sum that overflows.
func TestABacklogReportIsRefusedPastItsBound(t *testing.T) {
	b := newBacklogReplica(t, "b")
	forged := appendLoadReport(nil, &loadReport{origin: "x", epoch: 1, seq: 1, hi: math.MaxUint32, backlog: true,
		entries: []WorkerLoad{{Worker: 1, InFlight: maxBacklog + 1}}})
	if err := b.st.Receive(forged, t0); err == nil {
		t.Fatal("a backlog over the bound was accepted")
	}
	if got := b.remoteBacklog.get(1); got != 0 {
		t.Fatalf("the refused report counted %d", got)
	}
}
