package sim

import (
	"testing"
	"time"
)

func TestVirtualClockMovesOnlyForward(t *testing.T) {
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewVirtualClock(epoch)
	c.AdvanceTo(3 * time.Second)
	c.AdvanceTo(time.Second)
	c.Advance(-time.Hour)
	c.Advance(time.Second)
	if c.Elapsed() != 4*time.Second || !c.Now().Equal(epoch.Add(4*time.Second)) {
		t.Fatalf("clock at %v (%v), want 4s after epoch", c.Elapsed(), c.Now())
	}
}
