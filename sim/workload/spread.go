package workload

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"time"
)

// SpreadArrivals returns a copy of records with each arrival moved later by a
// uniform random offset in [0, within), drawn from seed, in the new order of
// arrival (records that land on the same instant keep their file order).
//
// It is for traces whose timestamps are buckets rather than arrivals: the
// shared conversation trace stamps its requests in 3 s steps, so replayed as
// recorded every request of a step arrives in the same instant, a burst that
// no report between router replicas can cover. Spread over its step, a
// request arrives at a time it could have had. within <= 0 returns the
// records as they are.
func SpreadArrivals(records []TraceRecord, within time.Duration, seed uint64) []TraceRecord {
	out := slices.Clone(records)
	if within <= 0 {
		return out
	}
	rnd := rand.New(rand.NewPCG(seed, 0x5eed))
	for i := range out {
		out[i].Timestamp += time.Duration(rnd.Int64N(int64(within)))
	}
	slices.SortStableFunc(out, func(a, b TraceRecord) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
	return out
}
