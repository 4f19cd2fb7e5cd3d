// Package exposition writes a metrics.Set in Prometheus' text format with
// a help text on every family. VictoriaMetrics/metrics writes "# HELP name"
// with nothing after it; the packages that register families describe them
// here (Describe, next to their registrations), and Write fills those lines
// in at scrape time. A family nobody described keeps its empty help line,
// which the tests that scrape a live replica refuse, so a new family cannot
// ship without one.
package exposition
