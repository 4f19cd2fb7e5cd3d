package loadsync

import (
	"slices"
	"time"
)

// LagSummary summarises the recent lags of accepted load reports: receive
// time minus the sender's timestamp. It is meaningful when the replicas'
// clocks agree (one machine, or NTP-synchronised hosts).
type LagSummary struct {
	// Samples is how many lags were ever recorded; the quantiles cover
	// only the most recent LagSamples of them.
	Samples  uint64
	P50, P99 time.Duration
	Max      time.Duration
}

// lagWindow keeps the most recent lag samples. Not safe for concurrent use.
type lagWindow struct {
	buf   []time.Duration
	next  int
	total uint64
}

func newLagWindow(size int) lagWindow { return lagWindow{buf: make([]time.Duration, 0, max(size, 1))} }

func (w *lagWindow) record(d time.Duration) {
	w.total++
	if len(w.buf) < cap(w.buf) {
		w.buf = append(w.buf, d)
		return
	}
	w.buf[w.next] = d
	w.next = (w.next + 1) % len(w.buf)
}

// snapshot copies the window so that it can be sorted without the lock.
func (w *lagWindow) snapshot() ([]time.Duration, uint64) {
	return slices.Clone(w.buf), w.total
}

func summarise(samples []time.Duration, total uint64) LagSummary {
	s := LagSummary{Samples: total}
	if len(samples) == 0 {
		return s
	}
	slices.Sort(samples)
	s.P50 = quantile(samples, 0.50)
	s.P99 = quantile(samples, 0.99)
	s.Max = samples[len(samples)-1]
	return s
}

// quantile reads the q-quantile of sorted samples (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
