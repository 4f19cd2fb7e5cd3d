package affinity

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"k8s.io/utils/clock"
)

// BenchmarkSelect measures one routing decision (select, reserve, record
// ownership, release) over a pool of 16, 256 and 2048 workers, with varied
// loads and a shared-prefix workload of 4 KiB prompts whose first KiB is a
// common system prompt. Hashing is measured apart in BenchmarkPrepare: the
// marginal cost of cache_aware over round_robin is the difference of the
// Select figures plus Prepare.
func BenchmarkSelect(b *testing.B) {
	for _, policy := range []string{PolicyRoundRobin, PolicyCacheAware} {
		for _, workers := range []int{16, 256, 2048} {
			b.Run(fmt.Sprintf("%s/workers=%d", policy, workers), func(b *testing.B) {
				benchSelect(b, policy, workers)
			})
		}
	}
}

func benchSelect(b *testing.B, policy string, workers int) {
	loads := NewLoadTable(nil)
	index := NewIndex(clock.RealClock{}, 1<<18)
	rng := rand.New(rand.NewPCG(7, 7))
	members := make([]*Load, workers)
	for i := range members {
		members[i] = loads.Get(WorkerID(i + 1))
		members[i].remote.Store(int64(rng.IntN(20)))
	}
	pool := NewPool(members)
	p, err := NewPolicy(Settings{Policy: policy, Thresholds: DefaultThresholds(),
		MissPlacement: PlaceLeastPrefill, BlockSize: DefaultBlockSize}, index)
	if err != nil {
		b.Fatal(err)
	}
	r := NewRouter(p, loads, index, DefaultBlockSize, nil)
	system := text("system", 1024)
	reqs := make([]*Request, 1000)
	for i := range reqs {
		reqs[i] = r.Prepare("m", []byte(system+text(fmt.Sprint("conversation", i), 3072)), uint64(i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		_, g, _ := r.Route(reqs[i%len(reqs)], pool)
		g.Release()
	}
}

// BenchmarkPrepare measures hashing a 4 KiB routing text into blocks.
func BenchmarkPrepare(b *testing.B) {
	r := NewRouter(LeastLoad{}, NewLoadTable(nil), nil, DefaultBlockSize, nil)
	body := []byte(text("prompt", 4096))
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r.Prepare("m", body, 0)
	}
}

// BenchmarkInsert measures recording a routed request's blocks in the
// index: a prompt of 16 blocks (4 KiB) and of 256 (64 KiB), held already by
// its worker (a conversation's next turn, the steady state), recorded from
// one goroutine and from one per GOMAXPROCS onto as many workers.
func BenchmarkInsert(b *testing.B) {
	for _, blocks := range []int{16, 256} {
		prompt := BlockHashes(nil, "m", []byte(text("prompt", blocks*DefaultBlockSize)), DefaultBlockSize)
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			ix := NewIndex(clock.RealClock{}, 1<<16)
			ix.Insert(prompt, 1)
			b.ReportAllocs()
			for b.Loop() {
				ix.Insert(prompt, 1)
			}
		})
		b.Run(fmt.Sprintf("blocks=%d/parallel", blocks), func(b *testing.B) {
			ix := NewIndex(clock.RealClock{}, 1<<16)
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := WorkerID(next.Add(1))
				ix.Insert(prompt, w)
				for pb.Next() {
					ix.Insert(prompt, w)
				}
			})
		})
	}
}
