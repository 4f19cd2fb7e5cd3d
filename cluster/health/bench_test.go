package health

import (
	"sync/atomic"
	"testing"
)

func benchMonitor(b *testing.B, n int) *Monitor {
	b.Helper()
	m, err := New(DefaultConfig(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.SetWorkers(targets(b, n)); err != nil {
		b.Fatal(err)
	}
	checkRound(b, m)
	return m
}

// BenchmarkEligible is the selector's per-candidate question.
func BenchmarkEligible(b *testing.B) {
	m := benchMonitor(b, 256)
	var next atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Eligible(1 + next.Add(1)%256)
		}
	})
}

// BenchmarkAttempt is a streamed request's whole accounting: Begin, a first
// byte, ten chunks and End, spread over 8 workers.
func BenchmarkAttempt(b *testing.B) {
	m := benchMonitor(b, 8)
	var next atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a, err := m.Begin(1 + next.Add(1)%8)
			if err != nil {
				b.Fatal(err)
			}
			for range 11 {
				a.Progress(1)
			}
			a.End(OutcomeSuccess)
		}
	})
}

// BenchmarkTick is the evaluation Run performs every EvalInterval.
func BenchmarkTick(b *testing.B) {
	m := benchMonitor(b, 1024)
	for id := WorkerID(1); id <= 1024; id++ {
		for range 8 {
			a, _ := m.Begin(id)
			a.Progress(1)
			a.Progress(10)
			a.End(OutcomeSuccess)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Tick()
	}
}
