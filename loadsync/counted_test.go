package loadsync

import (
	"slices"
	"sync"
	"testing"
)

// countedPeer records each Counted OnCounted hears, with the peer's load on
// worker 1 as the receiver held it at that moment.
type countedPeer struct {
	mu    sync.Mutex
	heard []Counted
	loads []int64
}

// TestCountedAnswersFollowTheLoadReportThatCountsThem: what a report counts
// of the placer's answers is read before its loads, travels after them, and
// reaches the peer once its load report is applied; it is sent again only
// when it changed.
func TestCountedAnswersFollowTheLoadReportThatCountsThem(t *testing.T) {
	var calls []string
	var counted Counted
	a := newReplica(t, "a", func(c *Config) {
		c.CountedAnswers = func() Counted { calls = append(calls, "counted"); return counted }
		local := c.LocalLoads
		c.LocalLoads = func(dst []WorkerLoad) []WorkerLoad { calls = append(calls, "loads"); return local(dst) }
	})
	got := &countedPeer{}
	var b *replica
	b = newReplica(t, "b", func(c *Config) {
		c.OnCounted = func(origin string, cn Counted) {
			if origin != "a" {
				t.Errorf("OnCounted from %q, want a", origin)
			}
			got.mu.Lock()
			defer got.mu.Unlock()
			got.heard = append(got.heard, Counted{Through: cn.Through, Also: slices.Clone(cn.Also)})
			got.loads = append(got.loads, b.st.Remote(1))
		}
	})

	counted = Counted{Through: 4, Also: []uint64{6, 9}}
	a.local.set(1, 3)
	pkts := a.st.Tick(t0)
	if !slices.Equal(calls, []string{"counted", "loads"}) {
		t.Fatalf("calls %v, want what is counted read before the loads", calls)
	}
	if kinds := sectionKinds(t, pkts[len(pkts)-1]); len(kinds) == 0 || kinds[len(kinds)-1] != secCounted {
		t.Fatalf("the last packet of the report holds sections %v, want the counted answers (%d) last", kinds, secCounted)
	}
	deliver(t, pkts, t0, b)
	if len(got.heard) != 1 || !got.heard[0].equal(counted) || got.loads[0] != 3 {
		t.Fatalf("b heard %+v with a's load %v, want %+v with the load of the report before it, 3", got.heard, got.loads, counted)
	}

	now := t0.Add(DefaultLoadInterval)
	deliver(t, a.st.Tick(now), now, b)
	if len(got.heard) != 1 {
		t.Fatalf("b heard %d counted answers after a report that counted the same, want it sent once", len(got.heard))
	}
	counted = Counted{Through: 9}
	now = now.Add(DefaultLoadInterval)
	deliver(t, a.st.Tick(now), now, b)
	if len(got.heard) != 2 || !got.heard[1].equal(counted) {
		t.Fatalf("b heard %+v, want the change %+v", got.heard, counted)
	}
}

func TestMalformedCountedAnswersAreRefused(t *testing.T) {
	heard := 0
	b := newReplica(t, "b", func(c *Config) { c.OnCounted = func(string, Counted) { heard++ } })
	good := appendCounted(nil, "a", Counted{Through: 2, Also: []uint64{4, 5}})
	tooMany := Counted{Through: 1}
	for n := range MaxCountedAlso + 1 {
		tooMany.Also = append(tooMany.Also, uint64(n+2))
	}
	for name, pkt := range map[string][]byte{
		"truncated":      good[:len(good)-1],
		"not increasing": append(slices.Clone(good[:len(good)-1]), 0),
		"too many":       appendCounted(nil, "a", tooMany),
	} {
		if err := b.st.Receive(pkt, t0); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if heard != 0 {
		t.Fatalf("OnCounted heard %d refused packets", heard)
	}
	if err := b.st.Receive(good, t0); err != nil || heard != 1 {
		t.Fatalf("the good packet: %v, heard %d", err, heard)
	}
	// A field a newer build appended is skipped.
	if err := b.st.Receive(append(slices.Clone(good), 7, 7), t0); err != nil || heard != 2 {
		t.Fatalf("the good packet with a field appended: %v, heard %d", err, heard)
	}
}
