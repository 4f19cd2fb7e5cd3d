package loadsync

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestGossipBudgetOnMemberlist cross-checks TestGossipBudget where real
// time allows: 8 replicas on real memberlist over loopback, the same load
// process in real time, bytes counted by Gossip's own counters. It is
// skipped unless LOADSYNC_BUDGET_REAL=1; LOADSYNC_BUDGET_REAL_SIZES picks the
// sizes (default "8x16,8x256,8x1024"), each run for 10 s per scheme.
func TestGossipBudgetOnMemberlist(t *testing.T) {
	if os.Getenv("LOADSYNC_BUDGET_REAL") != "1" {
		t.Skip("set LOADSYNC_BUDGET_REAL=1 to measure the gossip budget on memberlist")
	}
	spec := cmpOr(os.Getenv("LOADSYNC_BUDGET_REAL_SIZES"), "8x16,8x256,8x1024")
	var b strings.Builder
	b.WriteString("| replicas | workers | reports | load + digest payload B/s per replica | on the wire B/s | packets/s | report lag p50 / p99 ms | inbox drops |\n|---|---|---|---|---|---|---|---|\n")
	for _, s := range strings.Split(spec, ",") {
		var replicas, workers int
		if _, err := fmt.Sscanf(s, "%dx%d", &replicas, &workers); err != nil {
			t.Fatalf("LOADSYNC_BUDGET_REAL_SIZES: %q", s)
		}
		for _, scheme := range []string{"full", "delta"} {
			t.Run(fmt.Sprintf("%s/%s", s, scheme), func(t *testing.T) {
				b.WriteString(measureOnMemberlist(t, replicas, workers, scheme, 10*time.Second))
			})
		}
	}
	fmt.Println(b.String())
}

func measureOnMemberlist(t *testing.T, replicas, workers int, scheme string, run time.Duration) string {
	o := nodeOptions{}
	if scheme == "full" {
		o.tweak = func(c *Config) { c.FullReportInterval = DefaultLoadInterval }
	}
	nodes := startCluster(t, replicas, o)
	const inflight, mean = 64, 10 * time.Second
	load := newRealLoad(nodes, workers, inflight, mean)
	load.fill()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { load.drive(stop) })
	time.Sleep(2 * time.Second) // warm-up: full reports everywhere; a measurement window, not a wait
	before := make([]GossipStats, len(nodes))
	for i, n := range nodes {
		before[i] = n.g.Stats()
	}
	time.Sleep(run) // the measurement window itself
	close(stop)
	wg.Wait()
	var sent, packets, drops uint64
	var lags []time.Duration
	for i, n := range nodes {
		st := n.g.Stats()
		sent += st.BytesSent - before[i].BytesSent
		packets += st.PacketsSent - before[i].PacketsSent
		drops += st.InboxDropped - before[i].InboxDropped
		n.st.peers.mu.Lock()
		samples, _ := n.st.peers.lags.snapshot()
		n.st.peers.mu.Unlock()
		lags = append(lags, samples...)
	}
	lag := summarise(lags, uint64(len(lags)))
	secs := run.Seconds() * float64(replicas)
	return fmt.Sprintf("| %d | %d | %s | %s | %s | %.0f | %.1f / %.1f | %d |\n", replicas, workers, scheme,
		si(float64(sent)/secs), si((float64(sent)+budgetFraming*float64(packets))/secs), float64(packets)/secs,
		ms(lag.P50), ms(lag.P99), drops)
}

// realLoad is TestGossipBudget's load process in real time: requests
// arrive at random replicas, go to their session's worker, and leave after
// an exponential time.
type realLoad struct {
	nodes          []*node
	workers        int
	rate           float64 // requests per second, fleet-wide
	mean           time.Duration
	rng            *rand.Rand
	departures     budgetAgenda
	turns          []int
	start, arrival time.Time
}

func newRealLoad(nodes []*node, workers, inflight int, mean time.Duration) *realLoad {
	return &realLoad{nodes: nodes, workers: workers, rate: float64(workers*inflight) / mean.Seconds(), mean: mean,
		rng: rand.New(rand.NewPCG(1, uint64(workers))), turns: make([]int, workers*inflight), start: time.Now()}
}

// fill starts the steady state's requests at once.
func (l *realLoad) fill() {
	for range len(l.turns) {
		l.arrive(time.Now())
	}
	l.arrival = time.Now()
}

func (l *realLoad) arrive(now time.Time) {
	r := l.rng.IntN(len(l.nodes))
	session := l.rng.IntN(len(l.turns))
	l.turns[session]++
	w := uint32(mix(uint64(session)) % uint64(l.workers))
	l.nodes[r].st.Owned(chain(uint64(session), min(8+4*l.turns[session], 400)), w)
	l.nodes[r].local.add(w, 1)
	life := time.Duration(l.rng.ExpFloat64() * float64(l.mean))
	heap.Push(&l.departures, budgetEvent{at: now.Add(life).Sub(l.start), replica: r, worker: w})
}

// drive runs arrivals and departures every millisecond until stop.
func (l *realLoad) drive(stop <-chan struct{}) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			for !l.arrival.After(now) {
				l.arrive(now)
				l.arrival = l.arrival.Add(time.Duration(l.rng.ExpFloat64() / l.rate * float64(time.Second)))
			}
			for l.departures.Len() > 0 && l.departures[0].at <= now.Sub(l.start) {
				d := heap.Pop(&l.departures).(budgetEvent)
				l.nodes[d.replica].local.add(d.worker, -1)
			}
		}
	}
}
