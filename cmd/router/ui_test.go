package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// The status page (/ui) in a real headless Chromium, against a router
// process in front of workersim processes.

// chromiumPath finds a Chromium or Chrome binary; "" when there is none.
func chromiumPath() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts a headless Chromium for the test, or skips it. The
// context carries no deadline (one would end the browser); each step
// derives its own.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		t.Skip("no Chromium found (chromium, chromium-browser, google-chrome or $CHROMIUM): the status page test " +
			"needs one; on Debian: apt-get install -y chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1500, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// keepBusy sends streamed completions through router from n clients until
// the test ends, so that workers hold load and answer hits and misses.
// With think > 0 each client pauses up to that long between turns (the
// screenshot's load then moves as a real fleet's does).
func keepBusy(t *testing.T, router string, n int, think time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	client := &http.Client{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conv := strings.Repeat(fmt.Sprintf("Session %d: you are a careful agent working through a repository. ", i), 30)
			for turn := 0; ctx.Err() == nil; turn++ {
				if turn%6 == 5 { // a new session now and then: misses too
					conv = strings.Repeat(fmt.Sprintf("Session %d.%d: a new task in another repository. ", i, turn), 30)
				}
				conv += fmt.Sprintf(" Turn %d: the tool printed a listing of files. ", turn)
				body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":%d,"stream":true}`, conv, 16+rand.IntN(128))
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, router+"/v1/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if think > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(rand.N(think)):
					}
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait(); client.CloseIdleConnections() })
}

// statusPage loads /ui of router and waits until it shows want worker rows
// and its charts have drawn points from at least two polls; it returns the
// rows' text, the load chart's coloured pixels and a full-page PNG.
func statusPage(t *testing.T, ctx context.Context, router string, wantWorkers int) (rows []string, inked int, png []byte) {
	t.Helper()
	run, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	fail := func(what string, err error) {
		errText, _ := chromedp.Run(run, chromedp.Evaluate[string](`document.getElementById("error").textContent`))
		t.Fatalf("status page: %s: %v (the page's error line: %q)", what, err, errText)
	}
	if err := chromedp.Do(run, chromedp.Navigate(router+"/ui/?every=500")); err != nil {
		fail("loading", err)
	}
	ready := fmt.Sprintf(`document.querySelectorAll("#workers tbody tr").length === %d &&
		Number(document.querySelector("#load-chart").dataset.points || 0) >= %d &&
		Number(document.querySelector("#hit-chart").dataset.points || 0) >= 2`, wantWorkers, 2*wantWorkers)
	if _, err := chromedp.Run(run, chromedp.Poll[chromedp.Void](ready, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		fail("waiting for the worker rows and the charts", err)
	}
	var err error
	if rows, err = chromedp.Run(run, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("#workers tbody tr")).map(r => r.innerText)`)); err != nil {
		fail("reading the rows", err)
	}
	if inked, err = chromedp.Run(run, chromedp.Evaluate[int](inkedPixels("load-chart"))); err != nil {
		fail("reading the chart", err)
	}
	if png, err = chromedp.Run(run, chromedp.FullScreenshot(100)); err != nil {
		fail("screenshot", err)
	}
	return rows, inked, png
}

// inkedPixels is a script that counts the pixels of canvas id drawn in a
// series colour (saturated, unlike the grey grid and labels).
func inkedPixels(id string) string {
	return fmt.Sprintf(`(() => {
		const c = document.getElementById(%q), d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		let n = 0;
		for (let i = 0; i < d.length; i += 4) {
			const mx = Math.max(d[i], d[i+1], d[i+2]), mn = Math.min(d[i], d[i+1], d[i+2]);
			if (d[i+3] > 200 && mx - mn > 60) n++;
		}
		return n;
	})()`, id)
}

func TestStatusPageInHeadlessChromium(t *testing.T) {
	routerBin, workersim := binaries(t)
	ctx := browser(t)
	var urls []string
	for i := range 3 {
		_, u := startWorkersim(t, workersim, fmt.Sprint("w", i))
		urls = append(urls, u)
	}
	router := startRouterProcess(t, routerBin, "--worker-urls", strings.Join(urls, ","))
	keepBusy(t, router, 6, 0)
	rows, inked, png := statusPage(t, ctx, router, len(urls))
	for i, u := range urls {
		found := false
		for _, r := range rows {
			found = found || strings.Contains(r, u) && strings.Contains(r, "healthy") && strings.Contains(r, "closed")
		}
		if !found {
			t.Errorf("worker %d (%s): no row naming it healthy with a closed circuit in %q", i, u, rows)
		}
	}
	if inked < 50 {
		t.Errorf("the load chart has %d coloured pixels: no series drawn", inked)
	}
	classes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("#classes tbody tr")).map(r => r.innerText)`))
	if err != nil || len(classes) != 4 || !strings.HasPrefix(classes[0], "system") || !strings.HasPrefix(classes[3], "bulk") {
		t.Errorf("the admission table: %q, %v; want the four classes, system first", classes, err)
	}
	shot := filepath.Join(t.TempDir(), "ui.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}

// A page opened after minutes of traffic draws them at once: its first
// poll (and only one, the next being ten minutes away) finds charts
// already lined with the samples the replica kept while nobody watched.
func TestStatusPageDrawsTheRecentPastAtOnce(t *testing.T) {
	routerBin, workersim := binaries(t)
	ctx := browser(t)
	var urls []string
	for i := range 3 {
		_, u := startWorkersim(t, workersim, fmt.Sprint("w", i))
		urls = append(urls, u)
	}
	router := startRouterProcess(t, routerBin, "--worker-urls", strings.Join(urls, ","))
	keepBusy(t, router, 6, 0)
	const kept = 5
	testwait.Eventually(t, time.Minute, func() bool {
		return samplesWithWorkers(t, router, len(urls)) >= kept
	}, "%d samples of the three workers under traffic", kept)
	run, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(run, chromedp.Navigate(router+"/ui/?every=600000")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(run, chromedp.Poll[chromedp.Void](fmt.Sprintf(
		`document.body.dataset.polls === "1" && document.querySelectorAll("#workers tbody tr").length === %d`, len(urls)),
		chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		t.Fatalf("waiting for the first poll: %v", err)
	}
	points, err := chromedp.Run(run, chromedp.Evaluate[[]int](`[document.body.dataset.polls, document.querySelector("#load-chart").dataset.points,
		document.querySelector("#hit-chart").dataset.points].map(Number)`))
	if err != nil {
		t.Fatal(err)
	}
	polls, load, hit := points[0], points[1], points[2]
	if polls != 1 {
		t.Fatalf("the page polled %d times: its own polls could have drawn the lines", polls)
	}
	if want := kept * len(urls); load < want {
		t.Errorf("the load chart has %d points after one poll, want at least %d (the kept samples' and the poll's)", load, want)
	}
	if hit < kept-1 {
		t.Errorf("the hit-rate chart has %d points after one poll, want at least %d", hit, kept-1)
	}
	t.Logf("after one poll: %d load points, %d hit-rate points", load, hit)
}

// samplesWithWorkers counts the samples of router's /cluster/history that
// hold n workers.
func samplesWithWorkers(t *testing.T, router string, n int) int {
	resp, err := http.Get(router + "/cluster/history")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Samples []struct {
			Workers []json.RawMessage `json:"workers"`
		} `json:"samples"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, s := range h.Samples {
		if len(s.Workers) == n {
			count++
		}
	}
	return count
}

// freeAddr returns a loopback host:port that was free a moment ago, for
// the flags of processes that must know each other's ports up front. The
// system may hand a closed port out again at once, so a port this test
// binary already returned is never returned twice (two replicas of one
// tier were once given the same KV-event port).
func freeAddr(t *testing.T) string {
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if handedOut.claim(addr) {
			return addr
		}
	}
}

// handedOut are the addresses freeAddr returned.
var handedOut = addrSet{seen: map[string]bool{}}

type addrSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

// claim reports whether addr was not handed out before, and marks it.
func (s *addrSet) claim(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[addr] {
		return false
	}
	s.seen[addr] = true
	return true
}

// tierGossipBinds are the --gossip-bind addresses of a tier of n replicas
// started together: only the first, which the others join, is chosen
// here; every other replica binds a port the system picks, so no port
// freed here can be taken by another test before the replica binds it.
func tierGossipBinds(t *testing.T, n int) []string {
	t.Helper()
	binds := []string{freeAddr(t)}
	for range n - 1 {
		binds = append(binds, "127.0.0.1:0")
	}
	return binds
}

// TestStatusPageScreenshotForTheREADME makes docs/ui.png: three replicas as
// one cluster in front of four workersims under load, the page open for
// 90 polls a second apart so that its charts show a minute and a half.
// Run it with `make ui-screenshot` (KVROUTER_UI_SCREENSHOT names the file).
func TestStatusPageScreenshotForTheREADME(t *testing.T) {
	out := os.Getenv("KVROUTER_UI_SCREENSHOT")
	if out == "" {
		t.Skip("set KVROUTER_UI_SCREENSHOT=path.png to make the README's screenshot")
	}
	routerBin, workersim := binaries(t)
	ctx := browser(t)
	var urls []string
	for i := range 4 {
		_, u := startWorkersim(t, workersim, fmt.Sprint("sim-", i+1), "--time-scale", "1")
		urls = append(urls, u)
	}
	routers := startReplicaSet(t, routerBin, 3, urls)
	for _, r := range routers {
		keepBusy(t, r, 10, time.Second)
	}
	run, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	if err := chromedp.Do(run, chromedp.Navigate(routers[0]+"/ui/?every=1000")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(run, chromedp.Poll[chromedp.Void](`Number(document.body.dataset.polls || 0) >= 90`,
		chromedp.WithPollingTimeout(3*time.Minute))); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(run, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startReplicaSet starts n router processes as one cluster (router-1 ..
// router-n, n voters) with workers as router-1's seeds, and returns their
// API base URLs once each is ready. Every replica also gets extra flags.
func startReplicaSet(t *testing.T, routerBin string, n int, workers []string, extra ...string) []string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		procs := startReplicas(t, routerBin, n, workers, extra...)
		routers, err := awaitReady(procs)
		if err == nil {
			return routers
		}
		// The first replica's gossip port was free when chosen; another test's process may
		// have bound it since. Then the tier starts again on another port.
		if attempt == 3 || !strings.Contains(procs[0].tail.String(), "address already in use") {
			t.Fatal(err)
		}
		for _, p := range procs {
			p.kill()
		}
	}
}

// startReplicas starts a tier of n replicas, the first with workers, the others joining it.
func startReplicas(t *testing.T, routerBin string, n int, workers []string, extra ...string) []*process {
	t.Helper()
	gossip := tierGossipBinds(t, n)
	var procs []*process
	for i := range n {
		args := []string{"serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0",
			"--gossip-bind", gossip[i], "--data-dir", t.TempDir(), "--node-name", fmt.Sprintf("router-%d", i+1),
			"--bootstrap-expect", fmt.Sprint(n), "--miss-placement", "rendezvous"}
		args = append(args, extra...)
		if i > 0 {
			args = append(args, "--join", gossip[0])
		} else {
			args = append(args, "--worker-urls", strings.Join(workers, ","))
		}
		procs = append(procs, start(t, routerBin, args...))
	}
	return procs
}

// awaitReady is the API address of each replica once it says it is ready.
func awaitReady(procs []*process) ([]string, error) {
	var routers []string
	for _, p := range procs {
		addr, err := p.awaitLine(`router ready" addr=(\S+)`)
		if err != nil {
			return nil, err
		}
		routers = append(routers, "http://"+addr)
	}
	return routers, nil
}
