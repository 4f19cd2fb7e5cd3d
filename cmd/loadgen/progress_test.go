package main

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/internal/logsink"
)

func TestProgressPrintsOneLinePerTick(t *testing.T) {
	clock := newVirtualClock()
	start := clock.Now()
	c := newCollector(1)
	for range 5 {
		c.started()
	}
	c.add(result{status: 200, turn: -1})
	c.add(result{status: 500, errKind: "status_500", turn: -1})
	var out logsink.Sink
	ticks := make(chan time.Time)
	stop := startProgress(&out, ticks, c, clock, start)
	clock.Advance(2 * time.Second)
	ticks <- time.Time{}
	ticks <- time.Time{} // the second send returns once the first line is written
	stop()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines for 2 ticks: %q", len(lines), out.String())
	}
	want := "[    2s] sent 5  done 2  errors 1  in flight 3  1.0 req/s"
	if lines[0] != want {
		t.Fatalf("progress line %q, want %q", lines[0], want)
	}
}

func TestProgressToNowhereStartsNothing(t *testing.T) {
	stop := startProgress(nil, make(chan time.Time), newCollector(1), clock.RealClock{}, time.Now())
	stop()
}
