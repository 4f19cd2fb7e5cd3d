package loadsync

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The parts of the gossip a budget row breaks its bytes into: what each
// message or section carries. A msgReport's header is a part of its own
// (the older types each paid theirs in their part).
var budgetParts = []string{"report headers", "loads full", "loads delta", "loads step", "backlogs", "counted",
	"calibrations", "queues", "verdicts", "digests"}

// partOfType is the part an older type, or a digest, belongs to.
var partOfType = map[byte]string{
	msgLoad: "loads full", msgLoadDelta: "loads delta", msgBacklog: "backlogs", msgCounted: "counted",
	msgCalibrations: "calibrations", msgQueues: "queues", msgVerdicts: "verdicts", msgDigest: "digests",
}

// partOfSection is the part a msgReport section belongs to.
var partOfSection = map[byte]string{
	secLoadFull: "loads full", secLoadFullDense: "loads full", secLoadDelta: "loads delta", secLoadStep: "loads step",
	secBacklogFull: "backlogs", secBacklogStep: "backlogs", secCounted: "counted", secCalibrations: "calibrations",
	secFacts: "digests",
}

// addParts adds packet p's bytes to parts, a msgReport's section by section.
func addParts(parts map[string]uint64, p []byte) {
	if p[0] != msgReport {
		parts[partOfType[p[0]]] += uint64(len(p))
		return
	}
	_, r, _ := readHeader(p)
	_, _, _, _ = r.str(), r.uvarint(), r.uvarint(), r.varint()
	parts["report headers"] += uint64(r.off)
	for r.remaining() > 0 {
		start := r.off
		kind, n := r.byte(), r.uvarint()
		r.off += int(n)
		parts[partOfSection[kind]] += uint64(r.off - start)
	}
}

// breakdownTable prints where each row's bytes go, per replica per second,
// and the bytes of a load report (everything but digests) per peer.
func breakdownTable(rows []budgetRow) string {
	var b strings.Builder
	b.WriteString("Where the bytes go, payload per replica per second:\n\n| replicas | workers | reports |")
	for _, p := range budgetParts {
		b.WriteString(" " + p + " |")
	}
	b.WriteString(" reports/s | B per report per peer |\n|---|---|---|")
	b.WriteString(strings.Repeat("---|", len(budgetParts)+2) + "\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %d | %s |", r.run.replicas, r.run.workers, r.run.scheme)
		for _, p := range budgetParts {
			b.WriteString(" " + si(r.parts[p]) + " |")
		}
		fmt.Fprintf(&b, " %.0f | %.0f |\n", r.reports, r.bytesPerReport())
	}
	return b.String()
}

// bytesPerReport is what one load report costs per peer: the payload of
// everything but digests, over the reports and the peers.
func (r budgetRow) bytesPerReport() float64 {
	if r.reports == 0 {
		return 0
	}
	return r.loadBytes / r.reports / float64(r.run.replicas-1)
}

// budgetBound is what CI holds the gossip to, measured on a small fleet
// that costs each replica what 64 replicas x 1,024 workers do: 8 replicas x
// 1,024 workers at 8 requests a worker make each replica see the arrivals,
// departures and first tokens of one sixty-fourth of 64 x 1,024 x 64, and
// hold as many requests in flight.
const (
	// budgetBytesPerReport bounds a load report's payload per peer,
	// digests aside: every message of it, headers included.
	budgetBytesPerReport = 80
	// budgetPerReplica bounds what one replica sends a second at 64
	// replicas: its payload per peer, digests included, times 63 peers.
	budgetPerReplica = 1e6
	// budgetLagP99 bounds the merged load's lag p99.
	budgetLagP99 = 500 * time.Millisecond
)

// TestGossipStaysWithinItsBudget fails when a change raises the bytes of a
// load report per peer beyond budgetBytesPerReport, what a replica of 64
// would send beyond budgetPerReplica, or the merged load's lag p99 beyond
// budgetLagP99. It runs in a few seconds; TestGossipBudget measures the
// real sizes (LOADSYNC_BUDGET=1).
func TestGossipStaysWithinItsBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of simulation")
	}
	b := budgetRun{replicas: 8, workers: 1024, scheme: "report", loss: 0.01, measured: 2 * time.Second,
		inflight: 8, meanDuration: 10 * time.Second}
	row := b.run(t)
	perPeer := (row.loadBytes + row.digestBytes) / float64(b.replicas-1)
	at64 := perPeer * 63
	t.Logf("%.0f B per report per peer (bound %d), %.0f kB/s per replica at 64 replicas (bound %.0f), lag p99 %v (bound %v)",
		row.bytesPerReport(), budgetBytesPerReport, at64/1e3, budgetPerReplica/1e3, row.lagP99, budgetLagP99)
	t.Log("\n" + breakdownTable([]budgetRow{row}))
	if row.bytesPerReport() > budgetBytesPerReport {
		t.Errorf("a load report costs %.0f B per peer, over the %d bound", row.bytesPerReport(), budgetBytesPerReport)
	}
	if at64 > budgetPerReplica {
		t.Errorf("a replica of 64 would send %.0f kB/s, over the %.0f kB/s budget", at64/1e3, budgetPerReplica/1e3)
	}
	if row.lagP99 > budgetLagP99 {
		t.Errorf("the merged load's lag p99 is %v, over %v", row.lagP99, budgetLagP99)
	}
}
