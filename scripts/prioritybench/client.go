package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sample is one request as its client saw it.
type sample struct {
	start   time.Time
	ttft    time.Duration // to the first token event
	dur     time.Duration // to the end of the stream
	queue   time.Duration // x-admission-queue-ms
	tokens  int           // token events received
	status  int
	stream  string // which client stream sent it
	arrived bool   // a first token arrived
	failed  bool   // not a 200, or the stream carried an error or did not end with [DONE]
}

// recorder collects samples from every client.
type recorder struct {
	mu      sync.Mutex
	samples []sample
}

func (r *recorder) add(s sample) {
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
}

// between returns the samples of stream that started in [from, to).
func (r *recorder) between(stream string, from, to time.Time) []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sample
	for _, s := range r.samples {
		if s.stream == stream && !s.start.Before(from) && s.start.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}, Timeout: 10 * time.Minute}

// client is one closed-loop client: a streamed completion of maxTokens at a
// time, with think between, until stop.
type client struct {
	stream    string
	targets   func() string // the replica to send to
	headers   map[string]string
	promptLen int // bytes
	maxTokens int
	think     time.Duration
	rec       *recorder
	seed      uint64
}

func (c *client) run(stop time.Time) {
	rng := rand.New(rand.NewPCG(c.seed, 7))
	for time.Now().Before(stop) {
		s := c.once(rng)
		c.rec.add(s)
		if s.status != 200 {
			time.Sleep(50 * time.Millisecond)
		}
		if c.think > 0 {
			time.Sleep(c.think)
		}
	}
}

func (c *client) once(rng *rand.Rand) sample {
	// A random prompt, so that no prefix is shared between requests.
	var b strings.Builder
	for b.Len() < c.promptLen {
		fmt.Fprintf(&b, "%x ", rng.Uint64())
	}
	body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":%d,"stream":true}`, b.String(), c.maxTokens)
	req, _ := http.NewRequest(http.MethodPost, c.targets()+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	s := sample{start: time.Now(), stream: c.stream}
	resp, err := httpClient.Do(req)
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	s.status = resp.StatusCode
	if ms, err := strconv.Atoi(resp.Header.Get("x-admission-queue-ms")); err == nil {
		s.queue = time.Duration(ms) * time.Millisecond
	}
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			done = true
		}
		if !strings.HasPrefix(line, "data: ") || line == "data: [DONE]" {
			continue
		}
		if strings.Contains(line, `"error"`) {
			s.failed = true
		}
		if !s.arrived {
			s.ttft, s.arrived = time.Since(s.start), true
		}
		s.tokens++
	}
	s.dur = time.Since(s.start)
	s.failed = s.failed || s.status != http.StatusOK || !done
	return s
}

// pct is the q-quantile of ds (nearest rank), 0 for none.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := int(q*float64(len(ds)) + 0.5)
	return ds[min(max(i-1, 0), len(ds)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }

func loadavg() string {
	b, err := readFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(b)
	return strings.Join(f[:3], " ")
}
