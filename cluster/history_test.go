package cluster

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/cluster/admin/admintest"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

func TestSampleRingKeepsTheLatestOldestFirst(t *testing.T) {
	r := newSampleRing(3)
	if got := r.samples(); len(got) != 0 {
		t.Fatalf("a new ring holds %v", got)
	}
	at := func(s []adminapi.Sample) []float64 {
		var out []float64
		for _, x := range s {
			out = append(out, x.At)
		}
		return out
	}
	for i, want := range [][]float64{{1}, {1, 2}, {1, 2, 3}, {2, 3, 4}, {3, 4, 5}, {4, 5, 6}, {5, 6, 7}} {
		r.add(adminapi.Sample{At: float64(i + 1)})
		if got := at(r.samples()); !equalFloats(got, want) {
			t.Fatalf("after %d samples: %v, want %v", i+1, got, want)
		}
	}
	s := r.samples()
	s[0].At = 99 // a copy: the reader cannot change the ring
	if got := at(r.samples()); got[0] != 5 {
		t.Fatalf("changing the answer changed the ring: %v", got)
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// /cluster/history serves what the replica sampled of its workers while
// nobody watched: the counters of the traffic it routed, oldest first,
// within the span the page's charts draw.
func TestClusterHistoryServesTheRecentSamples(t *testing.T) {
	c := newTestCluster(t, 2)
	c.startN(1)
	c.waitReady()
	r := c.anyLive("")
	p := prompt("history", 4)
	for range 4 {
		c.complete(r, p)
	}
	var h adminapi.History
	testwait.Eventually(t, 30*time.Second, func() bool {
		reply := c.get(r, "/cluster/history")
		admintest.ExpectStatus(t, reply, http.StatusOK)
		if err := json.Unmarshal([]byte(reply.Body), &h); err != nil {
			t.Fatal(err)
		}
		n := len(h.Samples)
		return n >= 2 && decided(h.Samples[n-1]) == 4 && decided(h.Samples[n-2]) == 4
	}, "two samples after the traffic")
	if h.Node != r.cfg.NodeName || h.EverySeconds != historyEvery.Seconds() || h.SpanSeconds != historySpan.Seconds() {
		t.Fatalf("answer %+v", h)
	}
	if last := h.Samples[len(h.Samples)-1]; len(last.Workers) != 2 {
		t.Fatalf("the last sample has %d workers: %+v", len(last.Workers), last)
	}
	for i, s := range h.Samples {
		if i > 0 && s.At <= h.Samples[i-1].At {
			t.Fatalf("sample %d at %v is not after %v", i, s.At, h.Samples[i-1].At)
		}
	}
	if max := int(historySpan / historyEvery); len(h.Samples) > max {
		t.Fatalf("%d samples held, the ring holds %d", len(h.Samples), max)
	}
}

// decided counts the routing decisions of a sample, over its workers.
func decided(s adminapi.Sample) uint64 {
	var n uint64
	for _, w := range s.Workers {
		n += w.Hits + w.Misses
	}
	return n
}
