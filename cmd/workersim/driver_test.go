package main

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/sim"
)

// advance moves a synctest bubble's clock by d and returns once the driver has done what
// falls due: the bubble's time moves only when every goroutine in it waits, so the wake-ups come
// at their exact instants however loaded the machine is.
func advance(d time.Duration) {
	time.Sleep(d) // moves the bubble's clock: no real time passes
	synctest.Wait()
}

// nextEvents returns the ticket's events up to its Done, which must have been delivered by now,
// without the clock moving: in a bubble, once every goroutine waits, whatever fell due has been
// delivered, so a wake-up that comes late fails here instead of being waited out.
func nextEvents(t *testing.T, tk *ticket) []sim.Event {
	t.Helper()
	synctest.Wait()
	evs, err := tk.take(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Kind != sim.Done {
		t.Fatalf("events delivered by now: %+v, want them up to Done", evs)
	}
	return evs
}

// pending returns the events the driver has delivered so far, after bringing the engine up to
// the clock's time on its own goroutine.
func pending(t *testing.T, d *driver, tk *ticket) []sim.Event {
	t.Helper()
	if err := d.call(func() { d.catchUp() }); err != nil {
		t.Fatal(err)
	}
	evs, _ := tk.take(nil)
	return evs
}

func TestDriverRunsEngineTimeAtWallTimeTimesScale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := sim.DefaultConfig()
		d := newDriver(cfg, 3, clock.RealClock{}) // 3 does not divide the step time: the wake-up must round up
		defer d.Stop()
		tk, err := d.Submit(submission{prompt: make([]byte, 4000), maxTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		ttft := cfg.PrefillCost(1000) // engine time
		wall := (ttft + 2) / 3
		advance(wall - time.Microsecond)
		if evs := pending(t, d, tk); len(evs) != 0 {
			t.Fatalf("events before their time: %v", evs)
		}
		advance(time.Microsecond)
		evs := nextEvents(t, tk)
		if len(evs) != 2 || evs[0].Kind != sim.FirstToken || evs[0].At != ttft || evs[1].Kind != sim.Done {
			t.Fatalf("events = %+v, want first token and done at engine time %v", evs, ttft)
		}
	})
}

func TestDriverWedgeFreezesEngineTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := sim.DefaultConfig()
		d := newDriver(cfg, 1, clock.RealClock{})
		defer d.Stop()
		d.SetWedged(true)
		tk, err := d.Submit(submission{prompt: make([]byte, 4000), maxTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		advance(time.Hour)
		if evs := pending(t, d, tk); len(evs) != 0 {
			t.Fatalf("wedged engine progressed: %v", evs)
		}
		d.SetWedged(false)
		advance(cfg.PrefillCost(1000))
		if evs := nextEvents(t, tk); evs[0].Kind != sim.FirstToken || evs[0].At != cfg.PrefillCost(1000) {
			t.Fatalf("after unwedging: %+v; want the first token one prefill after the frozen instant", evs)
		}
	})
}

func TestDriverSlowdownStretchesSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := sim.DefaultConfig()
		d := newDriver(cfg, 1, clock.RealClock{})
		defer d.Stop()
		if err := d.SetSlowdown(4); err != nil {
			t.Fatal(err)
		}
		tk, _ := d.Submit(submission{prompt: make([]byte, 4000), maxTokens: 1})
		advance(4 * cfg.PrefillCost(1000))
		if evs := nextEvents(t, tk); evs[0].At != 4*cfg.PrefillCost(1000) {
			t.Fatalf("first token at %v, want 4 x %v", evs[0].At, cfg.PrefillCost(1000))
		}
		if err := d.SetSlowdown(-1); err == nil {
			t.Fatal("negative slowdown accepted")
		}
	})
}

func TestDriverCancelReportsUnfinishedRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDriver(sim.DefaultConfig(), 1, clock.RealClock{})
		defer d.Stop()
		tk, _ := d.Submit(submission{prompt: []byte("x"), maxTokens: 1000})
		if !d.Cancel(tk) {
			t.Fatal("cancel of a running request reported false")
		}
		if d.Cancel(tk) {
			t.Fatal("second cancel reported true")
		}
		done, _ := d.Submit(submission{prompt: []byte("x"), maxTokens: 1})
		advance(time.Second)
		nextEvents(t, done)
		if d.Cancel(done) {
			t.Fatal("cancel of a finished request reported true")
		}
	})
}

func TestDriverStopFailsRequestsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDriver(sim.DefaultConfig(), 1, clock.RealClock{})
		tk, _ := d.Submit(submission{prompt: []byte("x"), maxTokens: 5})
		d.Stop()
		d.Stop()
		if _, err := tk.take(nil); !errors.Is(err, errDriverStopped) {
			t.Fatalf("ticket error = %v", err)
		}
		if _, err := d.Submit(submission{prompt: []byte("x")}); !errors.Is(err, errDriverStopped) {
			t.Fatalf("submit after stop = %v", err)
		}
	})
}

func TestDriverCountsGeneratedTokensAsTheEngineSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := sim.DefaultConfig()
		d := newDriver(cfg, 1, clock.RealClock{})
		defer d.Stop()
		tk, err := d.Submit(submission{prompt: make([]byte, 4000), maxTokens: 100}) // not streamed
		if err != nil {
			t.Fatal(err)
		}
		advance(cfg.PrefillCost(1000) + 10*cfg.DecodeCost(1))
		if err := d.call(func() { d.catchUp(); d.publish() }); err != nil {
			t.Fatal(err)
		}
		if got := d.stats.generated.Load(); got < 2 || got >= 100 {
			t.Fatalf("generated tokens %d partway through a 100-token generation, want some and not all", got)
		}
		if evs, _ := tk.take(nil); len(evs) != 1 || evs[0].Kind != sim.FirstToken {
			t.Fatalf("events partway through: %+v, want only the first token", evs)
		}
	})
}

func TestDriverSubmitAllQueuesAllOrNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := sim.DefaultConfig()
		cfg.KVCapacityTokens = 1600
		d := newDriver(cfg, 1, clock.RealClock{})
		defer d.Stop()
		_, err := d.SubmitAll([]submission{{prompt: []byte("x"), maxTokens: 1}, {prompt: make([]byte, 8000), maxTokens: 1}})
		if !errors.Is(err, sim.ErrRequestTooLarge) {
			t.Fatalf("err = %v, want the second request refused", err)
		}
		_ = d.call(func() { d.publish() })
		if n := d.stats.running.Load() + d.stats.waiting.Load(); n != 0 {
			t.Fatalf("%d requests stayed queued after a refused job", n)
		}
		ts, err := d.SubmitAll([]submission{{prompt: []byte("a"), maxTokens: 1}, {prompt: []byte("b"), maxTokens: 1}})
		if err != nil || len(ts) != 2 || ts[0].id == ts[1].id {
			t.Fatalf("tickets %v, err %v", ts, err)
		}
	})
}

func TestDriverResetPrefixCacheWaitsForIdleAndKeepsCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDriver(sim.DefaultConfig(), 1, clock.RealClock{})
		defer d.Stop()
		if err := d.SetSlowdown(2); err != nil {
			t.Fatal(err)
		}
		tk, _ := d.Submit(submission{prompt: make([]byte, 4000), maxTokens: 2})
		if d.ResetPrefixCache() {
			t.Fatal("reset while a request runs")
		}
		advance(time.Minute)
		nextEvents(t, tk)
		cached, queries := 0, uint64(0)
		_ = d.call(func() { cached, queries = d.engine.CachedBlocks(), d.totals().prefixQueries })
		if cached == 0 || !d.ResetPrefixCache() {
			t.Fatalf("idle engine with %d cached blocks not reset", cached)
		}
		_ = d.call(func() { d.publish(); cached = d.engine.CachedBlocks() })
		if cached != 0 || d.stats.prefixQueries.Load() != queries || d.Config().Slowdown != 2 {
			t.Fatalf("after reset: %d cached blocks, %d queries (want %d), slowdown %v",
				cached, d.stats.prefixQueries.Load(), queries, d.Config().Slowdown)
		}
	})
}

// TestDriverRecordsTheEnginesOwnLatencyInWallSeconds: with one sequence at a time, the second of
// two requests submitted together waits for the first, and the histograms hold each one's time
// from its arrival at the engine, engine time over the scale.
func TestDriverRecordsTheEnginesOwnLatencyInWallSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := sim.DefaultConfig()
		cfg.MaxNumSeqs = 1
		d := newDriver(cfg, 2, clock.RealClock{})
		defer d.Stop()
		set := metrics.NewSet()
		lat := engineLatency{
			firstToken: set.NewPrometheusHistogramExt("ttft", firstTokenBuckets),
			e2e:        set.NewPrometheusHistogramExt("e2e", e2eBuckets),
		}
		d.SetLatency(&lat)
		advance(time.Second) // arrival is not engine time 0
		ts, err := d.SubmitAll([]submission{
			{prompt: make([]byte, 4000), maxTokens: 1},
			{prompt: make([]byte, 8000), maxTokens: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		var done [2]sim.Event
		for _, tk := range ts {
			for {
				evs, _ := tk.take(nil)
				if len(evs) > 0 && evs[len(evs)-1].Kind == sim.Done {
					done[tk.id-ts[0].id] = evs[len(evs)-1]
					break
				}
				advance(time.Millisecond)
			}
		}
		arrived := ts[0].arrived
		if arrived == 0 || ts[1].arrived != arrived {
			t.Fatalf("arrivals %v and %v, want the same instant after engine time 0", arrived, ts[1].arrived)
		}
		var wantE2E float64
		for _, ev := range done {
			wantE2E += (ev.At - arrived).Seconds() / 2
		}
		if got := histogramSum(t, set, "e2e"); math.Abs(got-wantE2E) > 1e-9 {
			t.Fatalf("e2e sum %v s, want %v s", got, wantE2E)
		}
		// The first token of a one-token answer comes at its Done: the second waited for the first.
		if got := histogramSum(t, set, "ttft"); math.Abs(got-wantE2E) > 1e-9 || done[1].At <= done[0].At {
			t.Fatalf("ttft sum %v s, want %v s with the second request after the first (%v, %v)",
				got, wantE2E, done[0].At, done[1].At)
		}
	})
}

func histogramSum(t *testing.T, set *metrics.Set, name string) float64 {
	t.Helper()
	var b bytes.Buffer
	set.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+"_sum "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s_sum in\n%s", name, b.String())
	return 0
}
