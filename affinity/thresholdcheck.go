package affinity

import (
	"errors"
	"fmt"
	"math"
)

// The ranges of the thresholds, one check per field. A replica's flags
// (Thresholds.Validate), the registry's stored routing config
// (store.RoutingConfig.Validate) and fleetsim's config are checked with the
// same ones, so that a value the simulator takes is one a router takes.

// MinBalanceRel is the least BalanceRel: a factor below 1 would count the
// least-loaded candidate itself as overloaded.
const MinBalanceRel = 1

// MaxHotOwners bounds HotOwners: a prefix spread wider is no longer an
// affinity.
const MaxHotOwners = 64

// CheckCacheThreshold refuses a cache threshold out of [0, 1].
func CheckCacheThreshold(f float64) error {
	if !finite(f) || f < 0 || f > 1 {
		return fmt.Errorf("%v is not in [0, 1]", f)
	}
	return nil
}

// CheckBalanceAbs refuses a negative absolute overload margin.
func CheckBalanceAbs(f float64) error {
	if !finite(f) || f < 0 {
		return fmt.Errorf("%v must be >= 0", f)
	}
	return nil
}

// CheckBalanceRel refuses a relative overload factor below MinBalanceRel.
func CheckBalanceRel(f float64) error {
	if !finite(f) || f < MinBalanceRel {
		return fmt.Errorf("%v must be >= %d", f, MinBalanceRel)
	}
	return nil
}

// CheckHotLoad refuses a negative hot-prefix load.
func CheckHotLoad(f float64) error {
	if !finite(f) || f < 0 {
		return fmt.Errorf("%v must be >= 0", f)
	}
	return nil
}

// CheckHotOwners refuses more hot-prefix owners than MaxHotOwners. 0 is a
// stored config written before the field existed (spreading off).
func CheckHotOwners(n int) error {
	if n < 0 || n > MaxHotOwners {
		return fmt.Errorf("%d is not in 0..%d", n, MaxHotOwners)
	}
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// ThresholdError is a threshold out of range, named by the flag that sets
// it (cache-threshold, balance-abs-threshold, balance-rel-threshold,
// hot-prefix-load, hot-prefix-owners).
type ThresholdError struct {
	Flag string
	Err  error
}

func (e *ThresholdError) Error() string { return "--" + e.Flag + ": " + e.Err.Error() }

func (e *ThresholdError) Unwrap() error { return e.Err }

// Validate reports every field of t out of range, each a *ThresholdError,
// joined. HotOwners 0 is refused while HotLoad turns spreading on: a flag
// that spreads needs at least one owner to spread to.
func (t Thresholds) Validate() error {
	var errs []error
	for _, c := range []struct {
		flag string
		err  error
	}{
		{"cache-threshold", CheckCacheThreshold(t.CacheThreshold)},
		{"balance-abs-threshold", CheckBalanceAbs(t.BalanceAbs)},
		{"balance-rel-threshold", CheckBalanceRel(t.BalanceRel)},
		{"hot-prefix-load", CheckHotLoad(t.HotLoad)},
		{"hot-prefix-owners", checkSpreadOwners(t.HotLoad, t.HotOwners)},
	} {
		if c.err != nil {
			errs = append(errs, &ThresholdError{Flag: c.flag, Err: c.err})
		}
	}
	return errors.Join(errs...)
}

// checkSpreadOwners is CheckHotOwners, but for 0 while load turns
// spreading on.
func checkSpreadOwners(load float64, n int) error {
	if n == 0 && load > 0 {
		return fmt.Errorf("must be in 1..%d (got 0)", MaxHotOwners)
	}
	return CheckHotOwners(n)
}
