package loadsync

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestMeasure runs 3- and 5-replica clusters on loopback under a steady
// routing load and prints the gossip lag and bandwidth. It is skipped unless
// LOADSYNC_MEASURE=1; LOADSYNC_MEASURE_SECONDS sets the duration (default
// 10). Each replica makes 200 routing decisions per second over 64 workers
// (agentic sessions: conversations that grow a few blocks per turn), each
// request in flight for 0.2-2 s, so every worker's count changes constantly.
func TestMeasure(t *testing.T) {
	if os.Getenv("LOADSYNC_MEASURE") != "1" {
		t.Skip("set LOADSYNC_MEASURE=1 to measure gossip lag and bandwidth")
	}
	seconds, _ := strconv.Atoi(os.Getenv("LOADSYNC_MEASURE_SECONDS"))
	run := time.Duration(max(seconds, 10)) * time.Second
	for _, size := range []int{3, 5} {
		for _, encrypted := range []bool{false, true} {
			t.Run(fmt.Sprintf("replicas=%d/encrypted=%v", size, encrypted), func(t *testing.T) {
				measure(t, size, encrypted, run)
			})
		}
	}
}

func measure(t *testing.T, size int, encrypted bool, run time.Duration) {
	var o nodeOptions
	if encrypted {
		o.key = []byte("0123456789abcdef0123456789abcdef")
	}
	nodes := startCluster(t, size, o)
	before := make([]GossipStats, size)
	for i, n := range nodes {
		before[i] = n.g.Stats()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			drive(n, uint64(i), stop)
		}()
	}
	time.Sleep(run) // the measurement window itself, not a wait for a condition
	close(stop)
	wg.Wait()

	var lags []time.Duration
	var sent, packets, facts, state uint64
	for i, n := range nodes {
		st := n.g.Stats()
		sent += st.BytesSent - before[i].BytesSent
		packets += st.PacketsSent - before[i].PacketsSent
		facts += st.FactsSent - before[i].FactsSent
		state += st.StateBytesSent - before[i].StateBytesSent
		n.st.peers.mu.Lock()
		samples, _ := n.st.peers.lags.snapshot()
		n.st.peers.mu.Unlock()
		lags = append(lags, samples...)
	}
	lag := summarise(lags, uint64(len(lags)))
	secs := run.Seconds() * float64(size)
	overhead := 6.0 // memberlist's message type and CRC
	if encrypted {
		overhead += 29 // AES-GCM version, nonce and tag
	}
	t.Logf("%d replicas, encrypted=%v, %v: lag p50 %v p99 %v max %v (%d samples); per replica: %.0f B/s payload, %.0f B/s on the wire, %.0f packets/s, %.0f facts/s, %.0f B/s push/pull",
		size, encrypted, run, lag.P50, lag.P99, lag.Max, len(lags),
		float64(sent)/secs, (float64(sent)+overhead*float64(packets))/secs, float64(packets)/secs, float64(facts)/secs, float64(state)/secs)
}

// drive makes 200 routing decisions per second at one replica until stop.
func drive(n *node, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, 7))
	turns := make(map[uint64]int)
	type done struct {
		at     time.Time
		worker uint32
	}
	var inflight []done
	ticker := time.NewTicker(5 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-ticker.C:
			session := seed<<32 | uint64(rng.IntN(500))
			turns[session]++
			worker := uint32(session % 64)
			n.local.add(worker, 1)
			n.st.Owned(chain(session, min(8+4*turns[session], 400)), worker)
			inflight = append(inflight, done{at: now.Add(time.Duration(200+rng.IntN(1800)) * time.Millisecond), worker: worker})
			kept := inflight[:0]
			for _, d := range inflight {
				if now.After(d.at) {
					n.local.add(d.worker, -1)
				} else {
					kept = append(kept, d)
				}
			}
			inflight = kept
		}
	}
}

func (l *localLoads) add(w uint32, d int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loads[w] += d
}
