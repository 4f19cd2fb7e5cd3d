package loadsync

import (
	"testing"
)

// BenchmarkOwned is the request-path cost: one decision on a conversation
// of 64 blocks whose facts are already known (a continuation turn).
func BenchmarkOwned(b *testing.B) {
	r := newReplica(b, "a", nil)
	hashes := chain(1, 64)
	r.st.Owned(hashes, 3)
	b.ReportAllocs()
	for b.Loop() {
		r.st.Owned(hashes, 3)
	}
}

// BenchmarkReceiveLoadReport merges 64-worker reports from one peer, each
// changing about half of the counts.
func BenchmarkReceiveLoadReport(b *testing.B) {
	r := newReplica(b, "r", nil)
	reports := make([][]byte, b.N)
	for i := range reports {
		loads := make([]WorkerLoad, 0, 64)
		for w := range uint32(64) {
			loads = append(loads, WorkerLoad{Worker: w, InFlight: int64(w%7) + int64((i+int(w))%2) + 1})
		}
		base := loadReport{origin: "a", epoch: 1, seq: uint64(i + 1), sentAt: t0.UnixNano()}
		reports[i] = packLoadReport(base, loads, DefaultMaxPacketBytes)[0]
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := r.st.Receive(reports[i], t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTick builds a 64-worker report and flushes 200 queued facts.
func BenchmarkTick(b *testing.B) {
	a := newReplica(b, "a", nil)
	for w := range uint32(64) {
		a.local.set(w, int64(w%7)+1)
	}
	now, conv := t0, uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		for range 100 {
			conv++
			a.st.Owned(chain(conv, 2), 1)
		}
		now = now.Add(DefaultLoadInterval)
		a.st.Tick(now)
	}
}
