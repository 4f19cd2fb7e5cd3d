package affinity

import (
	"errors"
	"math"
	"testing"
)

// TestThresholdsOutOfRangeAreRefusedNamingTheirFlag: each field out of its
// range is refused, named by the flag that sets it, and the defaults, and
// spreading turned off with no owners, pass.
func TestThresholdsOutOfRangeAreRefusedNamingTheirFlag(t *testing.T) {
	for flag, bad := range map[string]func(*Thresholds){
		"cache-threshold":       func(th *Thresholds) { th.CacheThreshold = 1.5 },
		"balance-abs-threshold": func(th *Thresholds) { th.BalanceAbs = math.Inf(1) },
		"balance-rel-threshold": func(th *Thresholds) { th.BalanceRel = 0.5 },
		"hot-prefix-load":       func(th *Thresholds) { th.HotLoad = math.NaN() },
		"hot-prefix-owners":     func(th *Thresholds) { th.HotOwners = 0 },
	} {
		th := DefaultThresholds()
		bad(&th)
		var te *ThresholdError
		if err := th.Validate(); !errors.As(err, &te) || te.Flag != flag {
			t.Errorf("%s out of range: %v, want a *ThresholdError naming it", flag, err)
		}
	}
	off := DefaultThresholds()
	off.HotLoad, off.HotOwners = 0, 0
	for name, th := range map[string]Thresholds{"the defaults": DefaultThresholds(), "spreading off": off} {
		if err := th.Validate(); err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
}
