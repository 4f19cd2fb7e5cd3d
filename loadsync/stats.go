package loadsync

import "sync/atomic"

// Stats are a State's cumulative counters, for metrics.
type Stats struct {
	// ReportsSent counts load reports emitted by Tick (one per interval,
	// however many packets it took).
	ReportsSent uint64
	// FullReportsSent counts the reports that were full rather than
	// deltas against the last full one.
	FullReportsSent uint64
	// ReportsAccepted counts load packets merged; ReportsStale those
	// ignored as older than, or a copy of, what was held.
	ReportsAccepted, ReportsStale uint64
	// DeltasInexact counts delta reports merged without the full report
	// they were taken against (it was lost, is late, or came before this
	// replica heard the origin): their counts were applied, but the view of
	// that origin stays inexact until its next full report.
	DeltasInexact uint64
	// DecodeErrors counts packets and states that did not decode.
	DecodeErrors uint64
	// UnknownMessages counts messages of a type this build does not know,
	// skipped: a newer build's, which no peer that checks what this
	// replica announced sends it. Not errors.
	UnknownMessages uint64
	// FactsQueued counts facts Owned queued; FactsDeduplicated those it
	// skipped as recently sent or learned; FactsDropped those pushed out of
	// a full queue before being sent; FactsSent those packed into digests.
	FactsQueued, FactsDeduplicated, FactsDropped, FactsSent uint64
	// FactsLearned counts facts received in digests and full states.
	FactsLearned uint64
	// VerdictsUnsent counts verdicts left out of full verdict packets.
	VerdictsUnsent uint64
	// CalibrationsSent counts per-worker calibrations sent (one per worker
	// judged in an interval); CalibrationsLearned those received about
	// known workers; CalibrationsDropped the judgements left out because
	// too many workers were pending.
	CalibrationsSent, CalibrationsLearned, CalibrationsDropped uint64
}

type counters struct {
	reportsSent, reportsAccepted, reportsStale, decodeErrors, unknownMessages atomic.Uint64
	factsQueued, factsDeduplicated, factsDropped, factsSent, factsLearned     atomic.Uint64
	verdictsUnsent, fullReportsSent, deltasInexact                            atomic.Uint64
	calibrationsSent, calibrationsLearned, calibrationsDropped                atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (s *State) Stats() Stats {
	c := &s.stats
	return Stats{
		ReportsSent:         c.reportsSent.Load(),
		FullReportsSent:     c.fullReportsSent.Load(),
		DeltasInexact:       c.deltasInexact.Load(),
		ReportsAccepted:     c.reportsAccepted.Load(),
		ReportsStale:        c.reportsStale.Load(),
		DecodeErrors:        c.decodeErrors.Load(),
		UnknownMessages:     c.unknownMessages.Load(),
		FactsQueued:         c.factsQueued.Load(),
		FactsDeduplicated:   c.factsDeduplicated.Load(),
		FactsDropped:        c.factsDropped.Load(),
		FactsSent:           c.factsSent.Load(),
		FactsLearned:        c.factsLearned.Load(),
		VerdictsUnsent:      c.verdictsUnsent.Load(),
		CalibrationsSent:    c.calibrationsSent.Load(),
		CalibrationsLearned: c.calibrationsLearned.Load(),
		CalibrationsDropped: c.calibrationsDropped.Load(),
	}
}
