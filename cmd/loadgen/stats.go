package main

import (
	"math"
	"slices"
)

// percentile returns the p-th percentile (0 <= p <= 100) of samples by linear interpolation
// between the closest ranks (rank p/100*(n-1), as numpy's default), 0 for no samples. samples is
// sorted in place.
func percentile(samples []float64, p float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	if !slices.IsSorted(samples) {
		slices.Sort(samples)
	}
	rank := p / 100 * float64(len(samples)-1)
	below := math.Floor(rank)
	lo := int(below)
	if lo >= len(samples)-1 {
		return samples[len(samples)-1]
	}
	return samples[lo] + (rank-below)*(samples[lo+1]-samples[lo])
}

// ratio returns part/whole, 0 when whole is 0.
func ratio(part, whole float64) float64 {
	if whole == 0 {
		return 0
	}
	return part / whole
}
