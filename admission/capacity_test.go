package admission

import (
	"testing"
	"time"
)

func TestAnEngineWithRequestsWaitingRunsAllItCan(t *testing.T) {
	var c Capacity
	c.Observe(Reading{Worker: 1, At: t0, Running: 3})
	if _, ok := c.Of(1); ok {
		t.Fatal("never seen full: no bound")
	}
	c.Observe(Reading{Worker: 1, At: t0.Add(time.Second), Running: 4, Waiting: 2})
	if _, ok := c.Of(1); ok {
		t.Fatal("one reading with requests waiting may be a request caught between steps: no bound yet")
	}
	c.Observe(Reading{Worker: 1, At: t0.Add(2 * time.Second), Running: 3, Waiting: 2})
	if n, ok := c.Of(1); !ok || n != 4 {
		t.Fatalf("bound %d %v after two readings in a row of requests waiting, want 4 (the more it ran)", n, ok)
	}
	c.Observe(Reading{Worker: 2, At: t0, Running: 6, KVUsage: 0.97})
	if n, _ := c.Of(2); n != 6 {
		t.Fatalf("a full KV cache is a bound too: %d", n)
	}
	if got := c.Limit([]WorkerLoad{{Worker: 1, Others: 1}, {Worker: 2, Others: 10}}); got != 3 {
		t.Fatalf("limit %d, want 4-1 + max(0, 6-10)", got)
	}
	if got := c.Limit([]WorkerLoad{{Worker: 1}, {Worker: 3}}); got != -1 {
		t.Fatalf("a worker with no bound takes whatever comes: %d", got)
	}
	if _, ok := c.Of(2); ok {
		t.Fatal("a worker gone from the list is forgotten")
	}
}

func TestABoundIsRaisedOnceItHeldForProbeAfter(t *testing.T) {
	c := Capacity{ProbeAfter: 10 * time.Second}
	c.Observe(Reading{Worker: 1, At: t0.Add(-time.Second), Running: 4, Waiting: 1})
	c.Observe(Reading{Worker: 1, At: t0, Running: 4, Waiting: 1})
	c.Observe(Reading{Worker: 1, At: t0.Add(5 * time.Second), Running: 4})
	if n, _ := c.Of(1); n != 4 {
		t.Fatalf("%d", n)
	}
	c.Observe(Reading{Worker: 1, At: t0.Add(11 * time.Second), Running: 4})
	if n, _ := c.Of(1); n != 5 {
		t.Fatalf("raised to %d, want 5", n)
	}
	c.Observe(Reading{Worker: 1, At: t0.Add(11 * time.Second), Running: 9, Waiting: 9})
	if n, _ := c.Of(1); n != 5 {
		t.Fatal("a reading as old as the last applied changes nothing")
	}
	c.Observe(Reading{Worker: 1, At: t0.Add(12 * time.Second), Running: 7})
	if n, _ := c.Of(1); n != 7 {
		t.Fatalf("an engine running 7 has a bound of at least 7, not %d", n)
	}
}

func TestARequestCaughtBetweenStepsDoesNotLowerTheBound(t *testing.T) {
	var c Capacity
	c.Observe(Reading{Worker: 1, At: t0.Add(-time.Second), Running: 4, Waiting: 3})
	c.Observe(Reading{Worker: 1, At: t0, Running: 4, Waiting: 3})
	// One request arrived since the engine's last step: it waits a moment.
	c.Observe(Reading{Worker: 1, At: t0.Add(time.Second), Running: 3, Waiting: 1})
	c.Observe(Reading{Worker: 1, At: t0.Add(2 * time.Second), Running: 4})
	c.Observe(Reading{Worker: 1, At: t0.Add(3 * time.Second), Running: 2, Waiting: 1})
	if n, _ := c.Of(1); n != 4 {
		t.Fatalf("bound %d after readings caught between steps, want 4 kept", n)
	}
	// An engine that really runs fewer now (its KV is short) shows it twice.
	c.Observe(Reading{Worker: 1, At: t0.Add(4 * time.Second), Running: 2, Waiting: 2})
	if n, _ := c.Of(1); n != 2 {
		t.Fatalf("bound %d after two readings in a row of 2 running and requests waiting, want 2", n)
	}
}

func TestAFullKVCacheLowersTheBoundOnlyOnTwoReadingsInARow(t *testing.T) {
	var c Capacity
	c.Observe(Reading{Worker: 1, At: t0, Running: 8, KVUsage: 1})
	if n, _ := c.Of(1); n != 8 {
		t.Fatalf("a first full reading is a bound at once: %d", n)
	}
	// Longer prompts fill the KV with fewer sequences for a moment: one
	// reading, which a replica reading a second later would not have seen.
	c.Observe(Reading{Worker: 1, At: t0.Add(time.Second), Running: 5, KVUsage: 1})
	c.Observe(Reading{Worker: 1, At: t0.Add(2 * time.Second), Running: 9, KVUsage: 1})
	if n, _ := c.Of(1); n != 9 {
		t.Fatalf("bound %d after one full reading of 5 between 8 and 9, want 9 (raised at once, not lowered)", n)
	}
	c.Observe(Reading{Worker: 1, At: t0.Add(3 * time.Second), Running: 6, KVUsage: 1})
	c.Observe(Reading{Worker: 1, At: t0.Add(4 * time.Second), Running: 5, KVUsage: 0.99})
	if n, _ := c.Of(1); n != 6 {
		t.Fatalf("bound %d after two full readings in a row of 6 and 5, want 6 (the more it ran)", n)
	}
}
