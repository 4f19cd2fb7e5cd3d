package core

import (
	"fmt"
	"testing"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
)

// BenchmarkDecide is what the core adds to a routing decision (the look at
// what was known) against the router alone, on 16 workers that each own a
// conversation of 32 blocks, every request a hit.
func BenchmarkDecide(b *testing.B) {
	for _, through := range []string{"router", "core"} {
		b.Run(through, func(b *testing.B) {
			r, err := New(Config{Clock: clock.RealClock{}, BlockSize: blockSize, IndexBudget: 1 << 16})
			if err != nil {
				b.Fatal(err)
			}
			var ids []affinity.WorkerID
			for w := 1; w <= 16; w++ {
				ids = append(ids, affinity.WorkerID(w))
			}
			r.SetRegistry(ids)
			rt, err := r.NewRouter(affinity.Settings{Policy: affinity.PolicyCacheAware, MissPlacement: affinity.PlaceLeastLoad,
				Thresholds: affinity.DefaultThresholds()})
			if err != nil {
				b.Fatal(err)
			}
			var reqs []*affinity.Request
			for s := range 16 {
				text := []byte(fmt.Sprintf("%0*d", 32*blockSize, s))
				req := rt.Prepare("m", text, 0)
				d, g, _ := r.Decide(rt, req, allPool(r))
				g.Release()
				_ = d
				reqs = append(reqs, req)
			}
			pool := allPool(r)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				req := reqs[i%len(reqs)]
				if through == "core" {
					_, g, _ := r.Decide(rt, req, pool)
					g.Release()
				} else {
					_, g, _ := rt.Route(req, pool)
					g.Release()
				}
			}
		})
	}
}
