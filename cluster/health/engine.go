package health

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// maxMetricsBody bounds what one scrape reads of a worker's /metrics: vLLM's
// page is some tens of kilobytes, and a longer one fails the scrape. The page
// is parsed line by line as it arrives, so memory stays within one line
// (maxMetricsLine) however much, or however long, the worker sends.
const (
	maxMetricsBody = 2 << 20
	maxMetricsLine = 64 << 10
)

// errMetricsTooLarge: the worker's /metrics page exceeded maxMetricsBody, or
// one of its lines exceeded maxMetricsLine.
var errMetricsTooLarge = errors.New("metrics page too large")

// The engine metric families a scrape reads. The token counters rise with
// every engine step (prefill chunks and generated tokens), so a rise means the
// engine is working even while no response byte moves; the running gauge is
// shown in the status.
var (
	metricGenerationTokens = []byte("vllm:generation_tokens_total")
	metricPromptTokens     = []byte("vllm:prompt_tokens_total")
	metricRunning          = []byte("vllm:num_requests_running")
	// The saturation signal: requests the engine holds back, and how full
	// its KV cache is (0..1), as vLLM and SGLang name them.
	metricWaiting       = []byte("vllm:num_requests_waiting")
	metricKVUsage       = []byte("vllm:kv_cache_usage_perc")
	metricSGLangRunning = []byte("sglang:num_running_reqs")
	metricSGLangWaiting = []byte("sglang:num_queue_reqs")
	metricSGLangKVUsage = []byte("sglang:token_usage")
)

// engineReading is what one scrape found, summed over label sets (one per
// model the engine serves).
type engineReading struct {
	tokens    float64 // generation plus prompt tokens so far
	running   float64 // requests the engine is running
	waiting   float64 // requests it holds back, for want of room
	kvUsage   float64 // the fullest KV cache of its label sets, 0..1
	hasTokens bool    // a token counter was on the page
	lora      loraReading
}

// engineState is the latest good reading of a worker's engine. Guarded by the
// worker's mutex.
type engineState struct {
	reading engineReading
	at      int64 // when it was read, or 0 with ok false
	ok      bool
	last    int64 // when the latest scrape started
}

// scrape reads the engine's progress counters from t's /metrics within
// timeout, reading at most maxMetricsBody. Cancelling ctx aborts it.
func (p workerClient) scrape(ctx context.Context, t probeTarget, timeout time.Duration) (engineReading, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var dial ctxDialer
	defer dial.release()
	hc := p.client(ctx, t, &dial, timeout)
	hc.StreamResponseBody = true
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(t.metrics)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetConnectionClose()
	if err := hc.Do(req, resp); err != nil {
		return engineReading{}, fmt.Errorf("scraping metrics: %w", err)
	}
	defer func() { _ = resp.CloseBodyStream() }()
	if code := resp.StatusCode(); code < 200 || code > 299 {
		return engineReading{}, fmt.Errorf("scraping metrics: status %d", code)
	}
	return parseEngineMetrics(resp.BodyStream())
}

// parseEngineMetrics reads the engine's progress counters from a Prometheus
// text page, reading at most maxMetricsBody of it.
func parseEngineMetrics(r io.Reader) (engineReading, error) {
	limited := &io.LimitedReader{R: r, N: maxMetricsBody + 1}
	sc := bufio.NewScanner(limited)
	sc.Buffer(make([]byte, 0, 4096), maxMetricsLine)
	var out engineReading
	for sc.Scan() {
		out.add(sc.Bytes())
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong) || limited.N <= 0:
		return engineReading{}, errMetricsTooLarge
	case err != nil:
		return engineReading{}, fmt.Errorf("reading metrics: %w", err)
	}
	return out, nil
}

// add counts one line of the page if it is a sample of a family we read.
func (e *engineReading) add(line []byte) {
	name, value, ok := parseSample(line)
	if !ok {
		return
	}
	switch {
	case bytes.Equal(name, metricGenerationTokens), bytes.Equal(name, metricPromptTokens):
		e.tokens += value
		e.hasTokens = true
	case bytes.Equal(name, metricRunning), bytes.Equal(name, metricSGLangRunning):
		e.running += value
	case bytes.Equal(name, metricWaiting), bytes.Equal(name, metricSGLangWaiting):
		e.waiting += value
	case bytes.Equal(name, metricKVUsage), bytes.Equal(name, metricSGLangKVUsage):
		e.kvUsage = max(e.kvUsage, value)
	case bytes.Equal(name, metricLoRAInfo):
		e.lora.add(line, value)
	}
}

// parseSample splits a sample line `name{labels} value [timestamp]` into its
// name and value. Comments, blank lines and values that are not finite
// numbers are not samples.
func parseSample(line []byte) (name []byte, value float64, ok bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == '#' {
		return nil, 0, false
	}
	end := bytes.IndexAny(line, "{ \t")
	if end <= 0 {
		return nil, 0, false
	}
	name, rest := line[:end], line[end:]
	if rest[0] == '{' {
		closing := labelsEnd(rest)
		if closing < 0 {
			return nil, 0, false
		}
		rest = rest[closing+1:]
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 {
		return nil, 0, false
	}
	v, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, 0, false
	}
	return name, v, true
}

// labelsEnd returns the index of the '}' that closes the label set s starts
// with, skipping quoted label values (which may hold '}' and escaped quotes),
// or -1.
func labelsEnd(s []byte) int {
	quoted := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return i
		}
	}
	return -1
}

// EngineScraper reads the engines' /metrics: the token counters, which it
// hands the judge as progress of a silent worker, and the saturation signal
// (requests running and waiting, KV cache usage, LoRA state), which it keeps
// for admission to read with Readings. Which worker is read when is the
// judge's call (wantScrape, set by Tick). Safe for concurrent use; get it
// from Monitor.Engines.
type EngineScraper struct {
	timeout time.Duration // of one read (Config.Timeout)
	client  workerClient
	judge   *judge
	now     func() int64 // the Monitor's timeline
	log     *slog.Logger
}

// scrapeOne reads w's engine, keeps the reading, and hands the judge what
// it says of progress.
func (s *EngineScraper) scrapeOne(ctx context.Context, w *worker) {
	start := s.now()
	w.wantScrape.Store(false)
	s.judge.wedge.scrapeStarted(w, start)
	r, err := s.client.scrape(ctx, w.target, s.timeout)
	if ctx.Err() != nil {
		return
	}
	now := s.now()
	if err != nil {
		s.log.Debug("engine metrics unreadable", "worker", w.id, "url", w.url, "err", err)
	}
	if err == nil {
		s.keep(w, r, now)
	}
	s.judge.wedge.engineRead(w, start, now, r, err == nil)
}

// keep makes r, read at now, w's latest reading, whatever its counters.
func (s *EngineScraper) keep(w *worker, r engineReading, now int64) {
	w.mu.Lock()
	w.occupancy, w.occupancyAt, w.read = r, now, true
	w.mu.Unlock()
}

// recordEngine applies a reading taken at `at`. Token counters that rose
// since the previous reading show that the engine worked in between; the
// progress is credited at the previous reading's time, the latest instant at
// which it is known not to have happened yet, so a scrape never makes a
// silence look shorter than it was. A previous reading older than three
// scrape periods is a stale baseline (the rise may be from another busy
// period) and only replaced. A counter that fell (an engine restart) or a
// failed scrape starts afresh. Caller holds mu.
func (w *worker) recordEngine(at int64, r engineReading, good bool, every int64) {
	prev := w.engine
	if !good {
		w.engine = engineState{last: prev.last}
		return
	}
	w.engine = engineState{reading: r, at: at, ok: true, last: prev.last}
	if !prev.ok || at-prev.at > 3*every || r.tokens <= prev.reading.tokens {
		return
	}
	advance(&w.engineAt, prev.at)
	w.noteHeard(prev.at)
}

// EngineReading is the latest readable scrape of a worker's engine: what
// the saturation signal is judged from.
type EngineReading struct {
	ID      WorkerID
	At      time.Time // when it was read
	Running float64   // vllm:num_requests_running
	Waiting float64   // vllm:num_requests_waiting
	KVUsage float64   // vllm:kv_cache_usage_perc, 0..1
	// LoRA is the engine's vllm:lora_requests_info, when its page has it.
	LoRA *LoRAReading
}

// LoRAReading is an engine's LoRA state: how many adapters it runs at
// once (vLLM's max_loras) and the adapters running and waiting.
type LoRAReading struct {
	MaxLoRA          int
	Running, Waiting []string
}

// Readings appends the latest reading of every watched worker whose
// engine was read at least once.
func (s *EngineScraper) Readings(dst []EngineReading) []EngineReading {
	for _, w := range s.judge.list() {
		w.mu.Lock()
		r, at, read := w.occupancy, w.occupancyAt, w.read
		w.mu.Unlock()
		if read {
			e := EngineReading{ID: w.id, At: s.judge.timeAt(at), Running: r.running, Waiting: r.waiting, KVUsage: r.kvUsage}
			if r.lora.ok {
				e.LoRA = &LoRAReading{MaxLoRA: r.lora.maxLoRA, Running: r.lora.running, Waiting: r.lora.waiting}
			}
			dst = append(dst, e)
		}
	}
	return dst
}
