package main

import (
	"math"
	"slices"

	"github.com/zeebo/xxh3"
)

// modelMix spreads agentic sessions over models (LoRA adapters, say) with skewed popularity:
// model j of the list is chosen with weight 1/(j+1)^s, a Zipf law (s = 0: uniform), each
// session keeping its model for every turn, as a tenant's agent keeps its adapter.
type modelMix struct {
	models []string
	cdf    []float64 // cumulative weights, normalised to 1
	seed   uint64
}

// newModelMix is the mix of models under exponent s; nil for no models.
func newModelMix(models []string, s float64, seed int64) *modelMix {
	if len(models) == 0 {
		return nil
	}
	m := &modelMix{models: slices.Clone(models), seed: uint64(seed)}
	total := 0.0
	for j := range models {
		total += 1 / math.Pow(float64(j+1), s)
		m.cdf = append(m.cdf, total)
	}
	for j := range m.cdf {
		m.cdf[j] /= total
	}
	return m
}

// of is session's model: the same for every turn and every run of one seed.
func (m *modelMix) of(session int) string {
	var b [16]byte
	for i := range 8 {
		b[i], b[8+i] = byte(m.seed>>(8*i)), byte(uint64(session)>>(8*i))
	}
	u := float64(xxh3.Hash(b[:])>>11) / (1 << 53)
	j, _ := slices.BinarySearch(m.cdf, u)
	return m.models[min(j, len(m.models)-1)]
}
