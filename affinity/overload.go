package affinity

// Thresholds are the knobs of the cache-aware policy. Defaults follow the
// reference routers: CacheThreshold 0.3, BalanceAbs 64, BalanceRel 1.5; and
// a hot prefix spreads to more owners while its owners hold 8 requests more
// than the least-loaded candidate, up to 64.
type Thresholds struct {
	// CacheThreshold is the share of the routing text that must be matched
	// for a hit, strictly: exactly at the threshold is a miss.
	CacheThreshold float64
	// BalanceAbs is how many in-flight requests above the candidates'
	// minimum a worker needs before it can count as overloaded.
	BalanceAbs float64
	// BalanceRel is the factor over the candidates' minimum a worker needs
	// before it can count as overloaded.
	BalanceRel float64
	// HotLoad is how many in-flight requests above the least-loaded
	// candidate every owner of a hit's prefix must hold before the prefix
	// gains another owner (see hotCandidates); 0 turns spreading off.
	HotLoad float64
	// HotOwners is the most workers a hot prefix spreads over, the owners
	// it already has included.
	HotOwners int
}

// Defaults of the hot-prefix knobs. A cap of 3 owners kept one hot system
// prompt queued on three workers of eight in the agentic sessions of
// BENCHMARKS.md; the load condition alone stops the spread once the owners
// are within HotLoad of the least loaded, so the cap is set high.
const (
	DefaultHotLoad   = 8
	DefaultHotOwners = 64
)

// DefaultThresholds returns the reference routers' defaults.
func DefaultThresholds() Thresholds {
	return Thresholds{CacheThreshold: 0.3, BalanceAbs: 64, BalanceRel: 1.5,
		HotLoad: DefaultHotLoad, HotOwners: DefaultHotOwners}
}

// hot reports whether a prefix whose least-loaded owner holds load, with
// min the least-loaded candidate's, should gain another owner.
func (t Thresholds) hot(load, min int64) bool {
	return t.HotLoad > 0 && float64(load-min) >= t.HotLoad
}

// Overloaded is the per-request check: is a worker with load too hot compared
// with the least-loaded candidate (min)? Both conditions must hold, strictly.
func (t Thresholds) Overloaded(load, min int64) bool {
	return float64(load-min) > t.BalanceAbs && float64(load) > float64(min)*t.BalanceRel
}

// Hit reports whether matched of total bytes is a cache hit.
func (t Thresholds) Hit(matched, total int) bool {
	return total > 0 && float64(matched)/float64(total) > t.CacheThreshold
}
