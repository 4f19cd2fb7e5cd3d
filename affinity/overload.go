package affinity

// Thresholds are the knobs of the cache-aware policy. Defaults follow the
// reference routers: CacheThreshold 0.3, BalanceAbs 64, BalanceRel 1.5.
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
}

// DefaultThresholds returns the reference routers' defaults.
func DefaultThresholds() Thresholds {
	return Thresholds{CacheThreshold: 0.3, BalanceAbs: 64, BalanceRel: 1.5}
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
