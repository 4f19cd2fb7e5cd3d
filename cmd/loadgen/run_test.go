package main

import (
	"sync"
	"testing"
	"time"
)

// noTicks never ticks the progress line.
func noTicks() (<-chan time.Time, func()) { return nil, func() {} }

// testRun is a run against target on clock, with an hour's cap and a minute per request, that
// keeps every result.
type testRun struct {
	*run
	mu   sync.Mutex
	seen []result
}

func newTestRun(t testing.TB, target string, clock Clock) *testRun {
	t.Helper()
	c, err := newClient(clientConfig{targets: []string{target}, timeout: time.Minute}, clock)
	if err != nil {
		t.Fatal(err)
	}
	tr := &testRun{}
	tr.run = &run{
		client: c, clock: clock, results: newCollector(1), model: "test-model",
		duration: time.Hour, ticks: noTicks, onResult: tr.keep,
	}
	t.Cleanup(c.close)
	return tr
}

func (tr *testRun) keep(r result) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.seen = append(tr.seen, r)
}

// results returns the results so far.
func (tr *testRun) results() []result {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]result(nil), tr.seen...)
}
