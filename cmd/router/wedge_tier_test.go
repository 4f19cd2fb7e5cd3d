package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// TestAWedgedWorkerComesBackOnEveryReplicaOfATier: three router processes
// in front of four workersims under load; one worker is wedged (its own
// /admin/fault), judged wedged, held so a while longer, then cleared. Every
// replica has it eligible again within a few seconds, as the health
// measurement says, not once the backoff between its recovery probes,
// grown while each timed out against the wedge, lets the next one go.
func TestAWedgedWorkerComesBackOnEveryReplicaOfATier(t *testing.T) {
	routerBin, workersimBin := binaries(t)
	var workers []string
	for i := range 4 {
		_, url := startWorkersim(t, workersimBin, fmt.Sprintf("w%d", i+1), "--time-scale", "20")
		workers = append(workers, url)
	}
	routers := startTier(t, routerBin, 3, workers, "--wedge-timeout", "1s", "--health-check-interval-secs", "2",
		"--health-check-timeout-secs", "1", "--health-failure-threshold", "2")
	wedged := workers[0]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() { sendUntil(stop, routers[i%len(routers)], i) })
	}
	defer func() { close(stop); wg.Wait() }()
	testwait.Eventually(t, 20*time.Second, func() bool {
		for _, r := range routers {
			if st, ok := workerStat(r, wedged); !ok || !st.Healthy || st.Circuit != "closed" {
				return false
			}
		}
		return true
	}, "the workers to take traffic on every replica")
	setWorkerFault(t, wedged, `{"mode":"wedge"}`)
	judgedBy := ""
	testwait.Eventually(t, time.Minute, func() bool {
		for _, r := range routers {
			if st, ok := workerStat(r, wedged); ok && st.Wedged {
				judgedBy = r
				return true
			}
		}
		return false
	}, "a replica to judge the worker wedged")
	// Held 15 s in all, as the chaos scenario holds it.
	// Held 22 s after the verdict: recovery probes time out one after
	// another against the wedge meanwhile (each waits --wedge-timeout).
	time.Sleep(22 * time.Second) // the wedge the scenario holds, not a wait for a condition
	setWorkerFault(t, wedged, `{"mode":"none"}`)
	cleared := time.Now()
	back := map[string]time.Duration{}
	testwait.Eventually(t, time.Minute, func() bool {
		for _, r := range routers {
			if _, done := back[r]; done {
				continue
			}
			if st, ok := workerStat(r, wedged); ok && !st.Wedged && st.Circuit == "closed" && st.Healthy {
				back[r] = time.Since(cleared)
			}
		}
		return len(back) == len(routers)
	}, "every replica to have the worker back")
	worst := time.Duration(0)
	for _, r := range routers {
		t.Logf("%s (judged it wedged: %v) had it back %v after the wedge cleared", r, r == judgedBy, back[r].Round(time.Millisecond))
		worst = max(worst, back[r])
	}
	if worst > 5*time.Second {
		t.Errorf("a replica had the worker back %v after its wedge cleared, want within 5 s", worst.Round(time.Millisecond))
	}
}

// startTier starts n router processes as one cluster with extra flags, the
// workers as the first one's seeds, and returns their API base URLs once
// each is ready.
func startTier(t *testing.T, routerBin string, n int, workers []string, extra ...string) []string {
	t.Helper()
	gossip := tierGossipBinds(t, n)
	var procs []*process
	for i := range n {
		args := []string{"serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0",
			"--gossip-bind", gossip[i], "--data-dir", t.TempDir(), "--node-name", fmt.Sprintf("router-%d", i+1),
			"--bootstrap-expect", fmt.Sprint(n), "--miss-placement", "rendezvous"}
		if i > 0 {
			args = append(args, "--join", gossip[0])
		} else {
			args = append(args, "--worker-urls", strings.Join(workers, ","))
		}
		procs = append(procs, start(t, routerBin, append(args, extra...)...))
	}
	var routers []string
	for _, p := range procs {
		routers = append(routers, "http://"+p.await(t, `router ready" addr=(\S+)`))
	}
	return routers
}

// sendUntil sends short completions to router until stop closes.
func sendUntil(stop chan struct{}, router string, client int) {
	hc := &http.Client{Timeout: 20 * time.Second}
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		body := fmt.Sprintf(`{"model":"sim-model","prompt":"client %d turn %d","max_tokens":8,"stream":%v}`, client, n, n%2 == 1)
		resp, err := hc.Post(router+"/v1/completions", "application/json", strings.NewReader(body))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		time.Sleep(20 * time.Millisecond) // the client's pace
	}
}

type tierWorkerStat struct {
	URL     string `json:"url"`
	Healthy bool   `json:"healthy"`
	Circuit string `json:"circuit"`
	Wedged  bool   `json:"wedged"`
}

// workerStat is router's view of the worker at url.
func workerStat(router, url string) (tierWorkerStat, bool) {
	resp, err := http.Get(router + "/cluster/workers")
	if err != nil {
		return tierWorkerStat{}, false
	}
	defer resp.Body.Close()
	var ws struct{ Workers []tierWorkerStat }
	if json.NewDecoder(resp.Body).Decode(&ws) != nil {
		return tierWorkerStat{}, false
	}
	for _, w := range ws.Workers {
		if w.URL == url {
			return w, true
		}
	}
	return tierWorkerStat{}, false
}

func setWorkerFault(t *testing.T, worker, fault string) {
	t.Helper()
	resp, err := http.Post(worker+"/admin/fault", "application/json", strings.NewReader(fault))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fault %s on %s: %d", fault, worker, resp.StatusCode)
	}
}
