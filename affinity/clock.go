package affinity

import "k8s.io/utils/clock"

// SystemClock is the wall clock, clock.RealClock under its old name.
//
// Deprecated: pass clock.RealClock{}. The alias stays only until the callers in cluster/ and
// proxy/ (being rewritten elsewhere) switch over.
type SystemClock = clock.RealClock
