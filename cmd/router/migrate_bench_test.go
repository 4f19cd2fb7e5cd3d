package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBenchMigration measures streams that outlive their engine on real
// processes (make bench-migration; BENCHMARKS.md): under load, the worker
// holding the most streams is killed mid-stream, and every stream is
// compared with an uninterrupted run's text; then a worker holding 20
// long streams is removed with drain=migrate; then the kill of a decode
// worker under vLLM's disaggregation; then the kill again on
// llm-d-inference-sim. Three rounds; each prints its figures.
func TestBenchMigration(t *testing.T) {
	if os.Getenv("KVROUTER_BENCH_MIGRATION") == "" {
		t.Skip("a benchmark: make bench-migration runs it")
	}
	for round := 1; round <= 3; round++ {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			k := benchKill(t, 4, 48)
			for _, why := range k.failures {
				t.Logf("round %d: a failed stream: %s", round, why)
			}
			if k.notTaken+k.unresumable > 0 {
				t.Logf("round %d: the router counted %d cut streams no worker took and %d that could not resume", round, k.notTaken, k.unresumable)
			}
			d := benchDrain(t)
			t.Logf("round %d: kill: %d streams, %d resumed, %d failed, %d truncated, %d wrong text; client-visible pause of resumed streams p50 %v p99 %v; drain: 20 streams moved in %v, %d cut",
				round, k.streams, k.resumed, k.failed, k.truncated, k.wrong, k.p50, k.p99, d.took, d.cut)
			if k.failed+k.truncated+k.wrong > 0 {
				t.Errorf("round %d: %d streams failed, %d truncated, %d with the wrong text: want none", round, k.failed, k.truncated, k.wrong)
			}
			if d.cut > 0 {
				t.Errorf("round %d: the drain cut %d streams", round, d.cut)
			}
			pd := benchKillPD(t, 24)
			for _, why := range pd.failures {
				t.Logf("round %d: P/D: a failed stream: %s", round, why)
			}
			t.Logf("round %d: P/D decode kill: %d streams, %d resumed through a new prefill, %d failed, %d truncated, %d wrong text; pause p50 %v p99 %v",
				round, pd.streams, pd.resumed, pd.failed, pd.truncated, pd.wrong, pd.p50, pd.p99)
			if pd.failed+pd.truncated+pd.wrong > 0 {
				t.Errorf("round %d: P/D: %d streams failed, %d truncated, %d with the wrong text: want none", round, pd.failed, pd.truncated, pd.wrong)
			}
			p := benchKillPeer(t, 4, 48) // skipped, after the figures above, without the public engine
			for _, why := range p.failures {
				t.Logf("round %d: llm-d-inference-sim: a failed stream: %s", round, why)
			}
			t.Logf("round %d: llm-d-inference-sim kill: %d streams, %d resumed, %d failed, %d truncated; pause of the %d longest-paused streams p50 %v p99 %v",
				round, p.streams, p.resumed, p.failed, p.truncated, p.resumed, p.p50, p.p99)
			if p.failed+p.truncated > 0 {
				t.Errorf("round %d: llm-d-inference-sim: %d streams failed, %d truncated: want none", round, p.failed, p.truncated)
			}
		})
	}
}

type killFigures struct {
	streams, resumed, failed, truncated, wrong int
	// notTaken and unresumable are the router's count of cut streams no
	// other worker took, and of those whose shape or limit kept them.
	notTaken, unresumable int
	p50, p99              time.Duration
	failures              []string // each failed stream: its first worker and its end
}

// benchStream is one client's stream: what it read, and the longest wait
// between two of its events after the kill.
type benchStream struct {
	s     spliced
	pause time.Duration
}

func benchKill(t *testing.T, workers, streams int) killFigures {
	return killUnderLoad(t, startMigrationTier(t, workers), nil, streams)
}

// benchKillPD is benchKill on vLLM's disaggregation, two prefill and two
// decode workersims: the decode worker holding the most streams is killed,
// and each of its streams resumes through a new prefill.
func benchKillPD(t *testing.T, streams int) killFigures {
	return killUnderLoad(t, startPDMigrationTier(t, "--vllm-pd-disaggregation"), []string{"d1", "d2"}, streams)
}

// killUnderLoad opens streams on m, kills the worker among victims (nil:
// any) that holds the most, and judges every stream against an
// uninterrupted run's.
func killUnderLoad(t *testing.T, m *migrationTier, victims []string, streams int) killFigures {
	prompts := []string{"the sea", "the mountains", "a city at night", "a long journey"}
	bodyOf := func(p string) string {
		return fmt.Sprintf(`{"model":"sim-model","prompt":"write a long essay about %s","max_tokens":400,"stream":true,"stream_options":{"include_usage":true}}`, p)
	}
	want := map[string]spliced{}
	for _, p := range prompts {
		want[p] = streamAll(t, m.url, "/v1/completions", bodyOf(p))
	}
	c := openBenchStreams(m.url, streams, func(i int) string { return bodyOf(prompts[i%len(prompts)]) })
	victim, most := "", int64(-1)
	for id, u := range m.urls {
		if victims != nil && !slices.Contains(victims, id) {
			continue
		}
		if n := loadOf(t, m.url, u); n > most {
			victim, most = id, n
		}
	}
	m.workers[victim].kill()
	out := c.killed()
	f := killFigures{notTaken: int(migrated(t, m.url, "failed")), unresumable: int(migrated(t, m.url, "unresumable"))}
	var pauses []time.Duration
	for i, b := range out {
		f.streams++
		w := want[prompts[i%len(prompts)]]
		switch {
		case !b.s.done || b.s.errEvent != "":
			f.failed++
			f.failures = append(f.failures, fmt.Sprintf("first worker %s (victim %s), %d bytes of text, done %v, error %s",
				b.s.worker, victim, len(b.s.text), b.s.done, b.s.errEvent))
		case len(b.s.text) < len(w.text):
			f.truncated++
		case b.s.text != w.text || len(b.s.ids) != 1:
			f.wrong++
		}
		if b.s.worker == victim {
			f.resumed++
			pauses = append(pauses, b.pause)
		}
	}
	slices.Sort(pauses)
	if len(pauses) > 0 {
		f.p50, f.p99 = pauses[len(pauses)/2], pauses[min(len(pauses)-1, len(pauses)*99/100)]
	}
	return f
}

// benchStreams are concurrent streams, each read past its first 20
// events, whose clients wait to be told of a kill.
type benchStreams struct {
	out      []benchStream
	wg       sync.WaitGroup
	kill     chan struct{}
	killedAt time.Time
}

// openBenchStreams opens n streams on url, stream i of body(i), and
// returns once each has read its first 20 events.
func openBenchStreams(url string, n int, body func(i int) string) *benchStreams {
	c := &benchStreams{out: make([]benchStream, n), kill: make(chan struct{})}
	var ready sync.WaitGroup
	for i := range n {
		c.wg.Add(1)
		ready.Add(1)
		go func() {
			defer c.wg.Done()
			c.out[i] = readBenchStream(url, body(i), &ready, c.kill, &c.killedAt)
		}()
	}
	ready.Wait()
	return c
}

// killed tells the clients that the kill happened now and returns their
// streams once all have ended.
func (c *benchStreams) killed() []benchStream {
	c.killedAt = time.Now()
	close(c.kill)
	c.wg.Wait()
	return c.out
}

// readBenchStream reads a stream of body: 20 events, then it says it is
// ready and reads the rest, timing the longest wait between events after
// the kill.
func readBenchStream(url, body string, ready *sync.WaitGroup, killed <-chan struct{}, killedAt *time.Time) benchStream {
	var b benchStream
	b.s = spliced{ids: map[string]bool{}, created: map[int64]bool{}}
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		ready.Done()
		return b
	}
	defer resp.Body.Close()
	b.s.worker = resp.Header.Get("x-worker-id")
	r := bufio.NewReader(resp.Body)
	_, _ = b.s.read(r, 20)
	ready.Done()
	<-killed
	at := *killedAt
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return b
		}
		if gap := time.Since(at); gap > b.pause {
			b.pause = gap
		}
		at = time.Now()
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
			if data == "[DONE]" {
				b.s.done = true
				continue
			}
			var c streamChunk
			if json.Unmarshal([]byte(data), &c) == nil {
				b.s.add(c, data)
			}
		}
	}
}

type drainFigures struct {
	took time.Duration
	cut  int
}

func benchDrain(t *testing.T) drainFigures {
	m := startMigrationTier(t, 2, "--policy", "round_robin")
	long := strings.Replace(completionBody, `"max_tokens":120`, `"max_tokens":1500`, 1)
	var wg, ready sync.WaitGroup
	results := make([]spliced, 40)
	for i := range 40 {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			s := spliced{ids: map[string]bool{}, created: map[int64]bool{}}
			resp, err := http.Post(m.url+"/v1/completions", "application/json", strings.NewReader(long))
			if err != nil {
				ready.Done()
				results[i] = s
				return
			}
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			_, _ = s.read(r, 1)
			ready.Done()
			_, _ = s.read(r, -1)
			results[i] = s
		}()
	}
	ready.Wait()
	start := time.Now()
	req, _ := http.NewRequest(http.MethodDelete, m.url+"/workers/"+workerID(t, m.url, m.urls["w1"])+"?drain=migrate", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	f := drainFigures{took: time.Since(start)}
	wg.Wait()
	for _, s := range results {
		if !s.done || s.errEvent != "" {
			f.cut++
		}
	}
	return f
}

// benchKillPeer is benchKill on llm-d-inference-sims, engines nobody here
// wrote: their text is random, so a stream is judged by its end (one id,
// [DONE], no error) and by its usage (every token of max_tokens, with
// ignore_eos), not by its words. The sims name no worker in their answers,
// so the resumed streams are counted by the router's metric, and their
// pauses are taken as that many longest pauses.
func benchKillPeer(t *testing.T, engines, streams int) killFigures {
	base, sims := startPeerMigrationTier(t, engines)
	body := `{"model":"` + peerModel + `","prompt":"write a long essay about the sea","max_tokens":400,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	c := openBenchStreams(base, streams, func(int) string { return body })
	var victim *process
	most := int64(-1)
	for url, p := range sims {
		if n := loadOf(t, base, url); n > most {
			victim, most = p, n
		}
	}
	victim.kill()
	out := c.killed()
	f := killFigures{resumed: int(migrated(t, base, "resumed"))}
	var pauses []time.Duration
	for _, b := range out {
		f.streams++
		pauses = append(pauses, b.pause)
		switch {
		case !b.s.done || b.s.errEvent != "" || len(b.s.ids) != 1:
			f.failed++
			f.failures = append(f.failures, fmt.Sprintf("%d bytes of text, ids %d, done %v, error %s",
				len(b.s.text), len(b.s.ids), b.s.done, b.s.errEvent))
		case b.s.usage == nil || b.s.usage.Completion != 400:
			f.truncated++
		}
	}
	slices.Sort(pauses)
	if f.resumed > 0 {
		top := pauses[len(pauses)-min(f.resumed, len(pauses)):]
		f.p50, f.p99 = top[len(top)/2], top[min(len(top)-1, len(top)*99/100)]
	}
	return f
}
