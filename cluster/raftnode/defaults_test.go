package raftnode

import (
	"testing"
	"time"
)

// TestDefaultConfigHoldsTheTimingsTheFlagsDocument pins the defaults the
// --raft-*-timeout flags and the README state.
func TestDefaultConfigHoldsTheTimingsTheFlagsDocument(t *testing.T) {
	want := Timings{Heartbeat: time.Second, Election: 2 * time.Second, LeaderLease: time.Second, Commit: 50 * time.Millisecond}
	c := DefaultConfig()
	if c.Timings != want || c.ApplyTimeout != 5*time.Second {
		t.Fatalf("DefaultConfig() = %+v, want timings %+v and a 5s apply timeout", c, want)
	}
	if got := (Timings{}).withDefaults(); got != want {
		t.Fatalf("zero timings default to %+v, want %+v", got, want)
	}
}
