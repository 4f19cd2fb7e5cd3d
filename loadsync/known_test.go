package loadsync

import (
	"testing"
)

// TestCountsOfUnknownWorkersAreDroppedAsTheyArrive: with KnownWorker set, a
// peer's counts for workers the replica does not know never enter State,
// and a flood of a full report's ranges stops at maxReportRanges.
func TestCountsOfUnknownWorkersAreDroppedAsTheyArrive(t *testing.T) {
	r := newReplica(t, "r", func(c *Config) { c.KnownWorker = func(w uint32) bool { return w < 10 } })
	var loads []WorkerLoad
	for w := range uint32(4000) {
		loads = append(loads, WorkerLoad{Worker: w, InFlight: 3})
	}
	base := loadReport{origin: "a", epoch: 1, seq: 1, sentAt: t0.UnixNano()}
	for _, p := range packLoadReport(base, loads, DefaultMaxPacketBytes) {
		if err := r.st.Receive(p, t0); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.st.Remote(5); got != 3 {
		t.Errorf("a known worker's count is %d, want 3", got)
	}
	for _, w := range []uint32{10, 999, 3999} {
		if got := r.st.Remote(w); got != 0 {
			t.Errorf("unknown worker %d holds %d", w, got)
		}
	}
	if n := len(r.st.peers.loads.origins["a"].base); n != 10 {
		t.Errorf("the origin's base holds %d workers, want the 10 known", n)
	}

	// One range of one worker per packet, every lower bound new, one report.
	for lo := range uint32(2 * maxReportRanges) {
		p := appendLoadReport(nil, &loadReport{origin: "a", epoch: 1, seq: 2, sentAt: t0.UnixNano(), lo: lo, hi: lo,
			entries: []WorkerLoad{{Worker: lo, InFlight: 1}}})
		_ = r.st.Receive(p, t0)
	}
	if n := len(r.st.peers.loads.origins["a"].ranges); n > maxReportRanges {
		t.Errorf("one report was merged from %d ranges, more than %d", n, maxReportRanges)
	}
}
