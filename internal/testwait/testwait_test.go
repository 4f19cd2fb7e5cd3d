package testwait

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvrouter/kvrouter/internal/leaktest"
)

// TestMain fails the package if any goroutine outlives the tests.
func TestMain(m *testing.M) { leaktest.Main(m) }

// recorder is a testing.TB that keeps what Fatalf said instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	Eventually(r, time.Minute, func() bool { calls++; return calls == 3 }, "the third call")
	if r.failed != "" || calls != 3 {
		t.Fatalf("failed %q after %d calls, want no failure after 3", r.failed, calls)
	}
}

func TestEventuallyFailsSayingWhatNeverHappened(t *testing.T) {
	r := &recorder{TB: t}
	Eventually(r, 20*time.Millisecond, func() bool { return false }, "worker %d is up", 7)
	if !strings.Contains(r.failed, "worker 7 is up") || !strings.Contains(r.failed, "timed out after 20ms") {
		t.Fatalf("failure %q does not say what never happened and for how long", r.failed)
	}
}

func TestEventuallyNilFailsWithTheLastError(t *testing.T) {
	r := &recorder{TB: t}
	var n atomic.Int32
	EventuallyNil(r, 20*time.Millisecond, func() error { return fmt.Errorf("try %d refused", n.Add(1)) }, "the port opens")
	if !strings.Contains(r.failed, "the port opens") || !strings.Contains(r.failed, fmt.Sprintf("try %d refused", n.Load())) {
		t.Fatalf("failure %q does not carry the last error (try %d)", r.failed, n.Load())
	}
	r.failed = ""
	EventuallyNil(r, time.Minute, func() error { return nil }, "at once")
	if r.failed != "" {
		t.Fatalf("a nil condition failed: %q", r.failed)
	}
}

func TestHoldsReportsWithoutFailing(t *testing.T) {
	if Holds(10*time.Millisecond, func() bool { return false }) {
		t.Fatal("Holds reported a condition that never held")
	}
	if !Holds(time.Minute, func() bool { return true }) {
		t.Fatal("Holds missed a condition that held at once")
	}
}

// TestEventuallyWaitsOnTheBubblesClock waits an hour of a synctest bubble's time for something
// a timer does ten minutes in: the waits are virtual, so the test takes no real time.
func TestEventuallyWaitsOnTheBubblesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var done atomic.Bool
		time.AfterFunc(10*time.Minute, func() { done.Store(true) })
		start := time.Now()
		Eventually(t, time.Hour, done.Load, "the timer fired")
		if took := time.Since(start); took < 10*time.Minute || took > 11*time.Minute {
			t.Fatalf("saw the condition %v in, want just after 10m", took)
		}
	})
}
