package health

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// TestMeasureRecovery measures, in real time and with the default Config,
// how long a worker that wedges, pauses or degrades 20x takes to be detected
// and to get traffic again once it recovers. Four loopback workers stream
// completions (50 tokens at 20ms each after a 50ms first token) to a driver
// that sends 12 requests a second, each to the eligible worker with the
// fewest requests in flight, reporting headers and every chunk as progress.
// It uses only the Monitor's oldest API (New, SetWorkers, Run, Eligible,
// Begin, Progress, End), so the same file measures an older version of the
// package. Skipped unless HEALTH_MEASURE=1; it takes about two minutes.
func TestMeasureRecovery(t *testing.T) {
	if os.Getenv("HEALTH_MEASURE") != "1" {
		t.Skip("set HEALTH_MEASURE=1 to measure detection and recovery times in real time (about 2 minutes)")
	}
	for _, fault := range []string{"wedge", "pause", "degrade"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			measureFault(t, fault)
		})
	}
}

func measureFault(t *testing.T, fault string) {
	var ws []*measuredWorker
	var targets []Target
	for i := range 4 {
		w := startMeasuredWorker(t)
		ws = append(ws, w)
		targets = append(targets, Target{ID: WorkerID(i + 1), URL: w.url, Group: "regular/m"})
	}
	m, err := New(DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetWorkers(targets); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { _ = m.Run(ctx) })
	d := &measureDriver{m: m, ws: ws, rng: rand.New(rand.NewPCG(3, 5))}
	bg.Go(func() { d.drive(ctx) })
	defer func() { cancel(); ws[0].resume(); bg.Wait() }()
	testwait.Eventually(t, time.Minute, func() bool {
		return m.Eligible(1) && m.Eligible(2) && m.Eligible(3) && m.Eligible(4)
	}, "every worker eligible")
	time.Sleep(5 * time.Second) // traffic before the fault: part of the measured scenario
	switch fault {
	case "wedge", "pause":
		measureOutage(t, d, ws[0], fault)
	case "degrade":
		measureDegrade(t, d, ws[0])
	}
}

// measureOutage wedges or pauses worker 1 until 10s after it is judged, then
// lets it go and times how long it takes to get traffic again.
func measureOutage(t *testing.T, d *measureDriver, w *measuredWorker, fault string) {
	onset := time.Now()
	w.stop(fault == "pause")
	testwait.Eventually(t, 3*time.Minute, func() bool { return !d.m.Eligible(1) }, "the worker to be judged")
	detected := time.Since(onset)
	time.Sleep(10 * time.Second) // the outage goes on: part of the measured scenario
	routed := d.routed[0].Load()
	resumed := time.Now()
	w.resume()
	testwait.Eventually(t, 5*time.Minute, func() bool { return d.m.Eligible(1) }, "the recovered worker to be eligible")
	eligible := time.Since(resumed)
	testwait.Eventually(t, 5*time.Minute, func() bool { return d.routed[0].Load() > routed }, "traffic to the recovered worker")
	t.Logf("%s: detected %v after onset; eligible %v and traffic again %v after the worker recovered",
		fault, detected.Round(100*time.Millisecond), eligible.Round(10*time.Millisecond),
		time.Since(resumed).Round(100*time.Millisecond))
}

// measureDegrade slows worker 1 down 20x and times how long it takes to be
// excluded, and how much of its fair share of traffic it gets meanwhile.
func measureDegrade(t *testing.T, d *measureDriver, w *measuredWorker) {
	before := d.counts()
	onset := time.Now()
	w.slowdown.Store(20)
	testwait.Eventually(t, 3*time.Minute, func() bool { return !d.m.Eligible(1) }, "the degraded worker to be excluded")
	detected := time.Since(onset)
	window := max(60*time.Second, detected+10*time.Second)
	time.Sleep(window - time.Since(onset)) // the measured window itself
	after := d.counts()
	total := 0
	for i := range after {
		total += after[i] - before[i]
	}
	mine := after[0] - before[0]
	t.Logf("degrade 20x: excluded %v after onset; %d of %d requests in the %v after onset, %.2f of its fair share",
		detected.Round(100*time.Millisecond), mine, total, window.Round(time.Second), float64(mine)/(float64(total)/4))
}

// measureDriver is a client fleet in front of the Monitor, as the proxy
// would use it.
type measureDriver struct {
	m      *Monitor
	ws     []*measuredWorker
	rng    *rand.Rand
	mu     sync.Mutex
	busy   [4]int
	routed [4]atomic.Int64
	wg     sync.WaitGroup
}

func (d *measureDriver) counts() []int {
	out := make([]int, len(d.ws))
	for i := range out {
		out[i] = int(d.routed[i].Load())
	}
	return out
}

func (d *measureDriver) drive(ctx context.Context) {
	defer d.wg.Wait()
	tick := time.NewTicker(time.Second / 12)
	defer tick.Stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		i, a := d.pick()
		if a == nil {
			continue
		}
		d.wg.Go(func() { d.complete(ctx, client, i, a) })
	}
}

func (d *measureDriver) pick() (int, *Attempt) {
	d.mu.Lock()
	defer d.mu.Unlock()
	best := -1
	for _, i := range d.rng.Perm(len(d.ws)) {
		if d.m.Eligible(WorkerID(i+1)) && (best < 0 || d.busy[i] < d.busy[best]) {
			best = i
		}
	}
	if best < 0 {
		return 0, nil
	}
	a, err := d.m.Begin(WorkerID(best + 1))
	if err != nil {
		return 0, nil
	}
	d.busy[best]++
	d.routed[best].Add(1)
	return best, a
}

func (d *measureDriver) complete(ctx context.Context, client *http.Client, i int, a *Attempt) {
	defer func() { d.mu.Lock(); d.busy[i]--; d.mu.Unlock() }()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.ws[i].url+"/v1/completions",
		strings.NewReader(`{"prompt":"hi","stream":true,"max_tokens":50}`))
	resp, err := client.Do(req)
	if err != nil {
		a.End(OutcomeCanceled)
		return
	}
	defer resp.Body.Close()
	a.Progress(0)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") && line != "data: [DONE]" {
			a.Progress(1)
		}
	}
	if sc.Err() != nil {
		a.End(OutcomeCanceled)
		return
	}
	a.End(OutcomeSuccess)
}

// measuredWorker streams completions at its own pace; it can be stopped
// (every request, and when paused its health endpoint too, waits until it
// resumes) or slowed down.
type measuredWorker struct {
	url      string
	slowdown atomic.Int64
	mu       sync.Mutex
	gate     chan struct{} // closed while running
	paused   bool
}

func startMeasuredWorker(t *testing.T) *measuredWorker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &measuredWorker{url: "http://" + ln.Addr().String(), gate: make(chan struct{})}
	close(w.gate)
	w.slowdown.Store(1)
	srv := &fasthttp.Server{Handler: w.serve, MaxIdleWorkerDuration: 10 * time.Millisecond}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { w.resume(); _ = srv.Shutdown(); <-done })
	return w
}

func (w *measuredWorker) stop(pause bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate, w.paused = make(chan struct{}), pause
}

func (w *measuredWorker) resume() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.gate:
	default:
		close(w.gate)
	}
}

func (w *measuredWorker) serve(ctx *fasthttp.RequestCtx) {
	w.mu.Lock()
	gate, paused := w.gate, w.paused
	w.mu.Unlock()
	path := string(ctx.Path())
	if path == "/metrics" {
		ctx.SetStatusCode(fasthttp.StatusNotFound) // no engine counters to read
		return
	}
	if path != "/health" || paused {
		<-gate
	}
	slow := time.Duration(w.slowdown.Load())
	switch path {
	case "/health":
	case "/v1/completions":
		if !strings.Contains(string(ctx.PostBody()), `"stream":true`) {
			time.Sleep(slow * 50 * time.Millisecond) // a one-token answer, slow on purpose
			ctx.SetBodyString(`{"choices":[{"text":"!"}]}`)
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(bw *bufio.Writer) {
			time.Sleep(slow * 50 * time.Millisecond) // the fake worker's time to first token, slow on purpose
			for i := range 50 {
				fmt.Fprintf(bw, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
				if bw.Flush() != nil {
					return
				}
				time.Sleep(slow * 20 * time.Millisecond) // the fake worker's time per token, slow on purpose
			}
			fmt.Fprint(bw, "data: [DONE]\n\n")
			_ = bw.Flush()
		})
	default:
		ctx.SetStatusCode(fasthttp.StatusNotFound)
	}
}
