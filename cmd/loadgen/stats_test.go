package main

import (
	"math"
	"testing"
)

func TestPercentileInterpolatesBetweenClosestRanks(t *testing.T) {
	samples := []float64{40, 10, 30, 20, 50} // unsorted on purpose
	for _, tc := range []struct{ p, want float64 }{
		{0, 10}, {50, 30}, {90, 46}, {99, 49.6}, {100, 50}, {25, 20}, {10, 14},
	} {
		if got := percentile(samples, tc.p); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
}

func TestPercentileOfFewSamples(t *testing.T) {
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v, want 0", got)
	}
	if got := percentile([]float64{7}, 99); got != 7 {
		t.Errorf("p99 of one sample = %v, want 7", got)
	}
	if got := percentile([]float64{1, 2}, 50); got != 1.5 {
		t.Errorf("p50 of {1,2} = %v, want 1.5", got)
	}
}

func TestRatioOfNothingIsZero(t *testing.T) {
	if ratio(3, 0) != 0 || ratio(1, 4) != 0.25 {
		t.Fatal("ratio is wrong")
	}
}
