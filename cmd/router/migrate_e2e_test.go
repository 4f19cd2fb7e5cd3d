package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/peers"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// These tests cut streams under the router's feet on real processes: a
// router in front of workersims that draw their text from the prompt and a
// seed (--text-seed), so that a stream spliced over two workers can be
// compared token for token with an uninterrupted one.

// spliced is a stream as the client read it.
type spliced struct {
	text     string
	ids      map[string]bool
	created  map[int64]bool
	usage    *streamUsage
	done     bool   // it ended with [DONE]
	errEvent string // an error event it carried
	worker   string // the x-worker-id of its first worker
	roles    int    // chat deltas that named the role
}

type streamUsage struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

type streamChunk struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *streamUsage              `json:"usage"`
	Error *struct{ Message string } `json:"error"`
}

// openStream posts body to path and returns the response, its events to
// read with next.
func openStream(t *testing.T, url, path, body string) (*http.Response, *bufio.Reader) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s answered %d: %s", path, resp.StatusCode, b)
	}
	return resp, bufio.NewReader(resp.Body)
}

// readEvents reads up to n data events (n < 0: all) into s; it reports
// false when the stream ended first.
func (s *spliced) readEvents(t *testing.T, r *bufio.Reader, n int) bool {
	t.Helper()
	more, err := s.read(r, n)
	if err != nil {
		t.Fatal(err)
	}
	return more
}

// read is readEvents for any goroutine: a malformed event is its error.
func (s *spliced) read(r *bufio.Reader, n int) (bool, error) {
	for n != 0 {
		line, err := r.ReadString('\n')
		if err != nil {
			return false, nil
		}
		data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: ")
		if !ok {
			continue
		}
		n--
		if data == "[DONE]" {
			s.done = true
			continue
		}
		var c streamChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return false, fmt.Errorf("event %q: %w", data, err)
		}
		s.add(c, data)
	}
	return true, nil
}

func (s *spliced) add(c streamChunk, data string) {
	if c.Error != nil {
		s.errEvent = data
		return
	}
	s.ids[c.ID], s.created[c.Created] = true, true
	for _, ch := range c.Choices {
		s.text += ch.Text + ch.Delta.Content
		if ch.Delta.Role != "" {
			s.roles++
		}
	}
	if c.Usage != nil {
		s.usage = c.Usage
	}
}

// streamAll reads a whole stream of body on path.
func streamAll(t *testing.T, url, path, body string) spliced {
	t.Helper()
	resp, r := openStream(t, url, path, body)
	s := spliced{ids: map[string]bool{}, created: map[int64]bool{}, worker: resp.Header.Get("x-worker-id")}
	s.readEvents(t, r, -1)
	return s
}

// streamCut reads after events of a stream of body, calls cut with its
// worker's id, and reads the rest.
func streamCut(t *testing.T, url, path, body string, after int, cut func(worker string)) spliced {
	t.Helper()
	resp, r := openStream(t, url, path, body)
	s := spliced{ids: map[string]bool{}, created: map[int64]bool{}, worker: resp.Header.Get("x-worker-id")}
	if !s.readEvents(t, r, after) {
		t.Fatalf("the stream ended within %d events", after)
	}
	cut(s.worker)
	s.readEvents(t, r, -1)
	return s
}

// sameAsUninterrupted fails t unless got is want's stream: the same text,
// one id and one created, the usage of the whole generation, a clean end.
func sameAsUninterrupted(t *testing.T, got, want spliced) {
	t.Helper()
	switch {
	case !got.done || got.errEvent != "":
		t.Fatalf("the resumed stream did not end cleanly: done %v, error %q", got.done, got.errEvent)
	case got.text != want.text:
		t.Fatalf("spliced text differs from the uninterrupted run's:\n got %q\nwant %q", got.text, want.text)
	case len(got.ids) != 1 || len(got.created) != 1:
		t.Fatalf("the client saw ids %v and created %v; want one of each", got.ids, got.created)
	case got.usage == nil || want.usage == nil || *got.usage != *want.usage:
		t.Fatalf("usage %+v, uninterrupted %+v", got.usage, want.usage)
	}
}

// migrationTier is a router in front of workersims that draw the same text.
type migrationTier struct {
	url     string
	workers map[string]*process
	urls    map[string]string
}

func startMigrationTier(t *testing.T, n int, routerArgs ...string) *migrationTier {
	t.Helper()
	router, workersim := binaries(t)
	m := &migrationTier{workers: map[string]*process{}, urls: map[string]string{}}
	var urls []string
	for i := range n {
		id := fmt.Sprintf("w%d", i+1)
		p, u := startWorkersim(t, workersim, id, "--time-scale", "1", "--text-seed", "11")
		m.workers[id], m.urls[id] = p, u
		urls = append(urls, u)
	}
	m.url = startRouterProcess(t, router, append([]string{"--worker-urls", strings.Join(urls, ",")}, routerArgs...)...)
	testwait.Eventually(t, 20*time.Second, func() bool {
		for _, u := range urls {
			if !healthy(t, m.url, u) {
				return false
			}
		}
		return true
	}, "every worker healthy")
	return m
}

// fault sets a workersim fault on worker id.
func (m *migrationTier) fault(t *testing.T, id, fault string) {
	t.Helper()
	resp, err := http.Post(m.urls[id]+"/admin/fault", "application/json", strings.NewReader(fault))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fault %s on %s: %d", fault, id, resp.StatusCode)
	}
}

const (
	completionBody = `{"model":"sim-model","prompt":"once upon a time in a land far away","max_tokens":120,"stream":true,"stream_options":{"include_usage":true}}`
	chatBody       = `{"model":"sim-model","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"tell me a long story"}],"max_tokens":120,"stream":true,"stream_options":{"include_usage":true}}`
)

func migrated(t *testing.T, url, result string) float64 {
	return metric(t, url, `vllm_router_stream_migrations_total{result="`+result+`"}`)
}

// TestMigrationAKilledWorkersStreamResumesElsewhere: the engine of a stream
// dies after a few chunks; the client reads one stream, the same text as
// an uninterrupted run's token for token, one id and created, the usage of
// the whole generation, and the router's load goes back to zero.
func TestMigrationAKilledWorkersStreamResumesElsewhere(t *testing.T) {
	m := startMigrationTier(t, 3)
	for _, c := range []struct{ path, body string }{{"/v1/completions", completionBody}, {"/v1/chat/completions", chatBody}} {
		want := streamAll(t, m.url, c.path, c.body)
		got := streamCut(t, m.url, c.path, c.body, 5, func(worker string) { m.workers[worker].kill() })
		sameAsUninterrupted(t, got, want)
		if got.roles > 1 {
			t.Fatalf("%s: the client saw the role %d times", c.path, got.roles)
		}
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return migrated(t, m.url, "resumed") == 2 }, "two streams resumed")
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, m.url) == 0 }, "the router's load back to zero")
	if n := metric(t, m.url, "vllm_router_stream_errors_total"); n != 0 {
		t.Fatalf("%v stream errors", n)
	}
}

// TestMigrationAPDDecodeWorkerKilledResumesThroughANewPrefill: in both
// disaggregation protocols, the decode worker of a stream dies after a few
// chunks; the continuation goes through a prefill worker again (vLLM: its
// kv_transfer_params to the next decode worker; SGLang: both halves at
// once under a new bootstrap room), and the client reads the uninterrupted
// run's stream token for token.
func TestMigrationAPDDecodeWorkerKilledResumesThroughANewPrefill(t *testing.T) {
	for _, mode := range []string{"--vllm-pd-disaggregation", "--pd-disaggregation"} {
		t.Run(strings.TrimPrefix(mode, "--"), func(t *testing.T) {
			m := startPDMigrationTier(t, mode)
			want := streamAll(t, m.url, "/v1/completions", completionBody)
			got := streamCut(t, m.url, "/v1/completions", completionBody, 5, func(worker string) {
				if !strings.HasPrefix(worker, "d") {
					t.Fatalf("the stream's worker is %q, not a decode worker", worker)
				}
				m.workers[worker].kill()
			})
			sameAsUninterrupted(t, got, want)
			testwait.Eventually(t, 20*time.Second, func() bool { return migrated(t, m.url, "resumed") == 1 }, "the stream resumed")
			// One prefill for the uninterrupted run, one for the cut stream
			// and one for its continuation.
			if n := metric(t, m.url, "vllm_router_pd_prefill_requests_total"); n != 3 {
				t.Fatalf("%v prefill requests, want 3: the continuation must go through a prefill", n)
			}
			testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, m.url) == 0 }, "the router's load back to zero")
		})
	}
}

// TestMigrationAPDPrefillThatRefusesTheContinuationFailsTheStream: the
// decode worker dies and every prefill worker then answers errors; the
// stream fails visibly (the prefill's answer is never the client's),
// counted as a prefill error, and every guard is released.
func TestMigrationAPDPrefillThatRefusesTheContinuationFailsTheStream(t *testing.T) {
	m := startPDMigrationTier(t, "--vllm-pd-disaggregation", "--retry-max-retries", "1")
	got := streamCut(t, m.url, "/v1/completions", completionBody, 3, func(worker string) {
		m.fault(t, "p1", `{"mode":"errors","rate":1}`)
		m.fault(t, "p2", `{"mode":"errors","rate":1}`)
		m.workers[worker].kill()
	})
	if got.done || got.errEvent == "" {
		t.Fatalf("a refused continuation ended with done %v, error event %q", got.done, got.errEvent)
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return migrated(t, m.url, "failed") == 1 }, "the failed resume counted")
	if n := metric(t, m.url, `vllm_router_pd_errors_total{phase="prefill"}`); n != 1 {
		t.Fatalf("%v prefill errors counted, want 1", n)
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, m.url) == 0 }, "the router's load back to zero")
}

// startPDMigrationTier is a router disaggregating with mode (its flag), and
// routerArgs, over two prefill workersims (p1, p2) and two decode ones (d1,
// d2) that draw the same text.
func startPDMigrationTier(t *testing.T, mode string, routerArgs ...string) *migrationTier {
	t.Helper()
	router, workersim := binaries(t)
	m := &migrationTier{workers: map[string]*process{}, urls: map[string]string{}}
	args := append([]string{mode}, routerArgs...)
	for _, w := range []struct{ id, role string }{{"p1", "prefill"}, {"p2", "prefill"}, {"d1", "decode"}, {"d2", "decode"}} {
		p, u := startWorkersim(t, workersim, w.id, "--time-scale", "1", "--text-seed", "11", "--role", w.role)
		m.workers[w.id], m.urls[w.id] = p, u
		args = append(args, "--"+w.role, u)
	}
	m.url = startRouterProcess(t, router, args...)
	testwait.Eventually(t, 20*time.Second, func() bool {
		for _, u := range m.urls {
			if !healthy(t, m.url, u) {
				return false
			}
		}
		return true
	}, "every worker healthy")
	return m
}

// TestMigrationResumesAfterAnEngineErrorEvent: a worker that sends an error
// event mid-stream (as vLLM does when a generation fails) is replaced the
// same way; the client never sees the error.
func TestMigrationResumesAfterAnEngineErrorEvent(t *testing.T) {
	m := startMigrationTier(t, 2)
	want := streamAll(t, m.url, "/v1/completions", completionBody)
	got := streamCut(t, m.url, "/v1/completions", completionBody, 4, func(worker string) {
		m.fault(t, worker, `{"mode":"error_streams"}`)
	})
	sameAsUninterrupted(t, got, want)
}

// TestMigrationFailsVisiblyPastItsLimit: every worker cuts every stream; the
// stream resumes up to --migration-limit times, then fails visibly (an
// error event, no [DONE]), and every guard is released.
func TestMigrationFailsVisiblyPastItsLimit(t *testing.T) {
	m := startMigrationTier(t, 3, "--migration-limit", "1")
	got := streamCut(t, m.url, "/v1/completions", completionBody, 3, func(string) {
		for id := range m.workers {
			m.fault(t, id, `{"mode":"cut_streams","after":2}`)
		}
	})
	if got.done || got.errEvent == "" {
		t.Fatalf("past its limit the stream ended with done %v, error event %q", got.done, got.errEvent)
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return migrated(t, m.url, "resumed") == 1 }, "one resume")
	testwait.Eventually(t, 20*time.Second, func() bool { return metric(t, m.url, "vllm_router_stream_errors_total") == 1 }, "the stream error counted")
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, m.url) == 0 }, "the router's load back to zero")
}

// TestMigrationTheNextEngineRefusesTheResume: the only other worker answers
// the continuation with an error status: the stream fails visibly, and
// every guard is released.
func TestMigrationTheNextEngineRefusesTheResume(t *testing.T) {
	m := startMigrationTier(t, 2, "--retry-max-retries", "1")
	got := streamCut(t, m.url, "/v1/completions", completionBody, 3, func(worker string) {
		for id := range m.workers {
			if id != worker {
				m.fault(t, id, `{"mode":"errors","rate":1}`)
			}
		}
		m.workers[worker].kill()
	})
	if got.done || got.errEvent == "" {
		t.Fatalf("a refused resume ended with done %v, error event %q", got.done, got.errEvent)
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return migrated(t, m.url, "failed") == 1 }, "the failed resume counted")
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, m.url) == 0 }, "the router's load back to zero")
}

// TestMigrationRefusesShapesItCannotSplice: a request whose stream cannot
// be continued faithfully fails visibly when its worker is cut, as before
// migration: stop sequences, n > 1, logprobs, and a stream off (0) limit.
func TestMigrationRefusesShapesItCannotSplice(t *testing.T) {
	m := startMigrationTier(t, 2)
	for _, extra := range []string{`"stop":["zz"]`, `"n":2`, `"logprobs":1`, `"echo":true`} {
		body := strings.Replace(completionBody, `"stream":true`, `"stream":true,`+extra, 1)
		got := streamCut(t, m.url, "/v1/completions", body, 3, func(worker string) {
			m.fault(t, worker, `{"mode":"cut_streams"}`)
		})
		if got.done || got.errEvent == "" {
			t.Fatalf("%s: a cut stream that cannot resume ended with done %v, error event %q", extra, got.done, got.errEvent)
		}
		for id := range m.workers {
			m.fault(t, id, `{"mode":"none"}`)
		}
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return migrated(t, m.url, "unresumable") == 4 }, "four unresumable streams counted")
	if n := migrated(t, m.url, "resumed"); n != 0 {
		t.Fatalf("%v streams resumed", n)
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, m.url) == 0 }, "the router's load back to zero")
}

// TestMigrationAToolCallStreamFailsVisibly: a chat stream that carried a
// tool call delta no longer resumes.
// (workersim streams no tool calls; splice_test.go covers the refusal.)

// TestMigrationClientLeavesDuringTheResume: the client goes while its
// stream's continuation is being placed; every guard is released and
// nothing counts as a stream error.
func TestMigrationClientLeavesDuringTheResume(t *testing.T) {
	m := startMigrationTier(t, 2)
	resp, r := openStream(t, m.url, "/v1/completions", completionBody)
	s := spliced{ids: map[string]bool{}, created: map[int64]bool{}}
	s.readEvents(t, r, 3)
	worker := resp.Header.Get("x-worker-id")
	for id := range m.workers {
		if id != worker {
			m.fault(t, id, `{"mode":"wedge"}`) // the continuation waits for its first token
		}
	}
	m.workers[worker].kill()
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, m.url) == 1 }, "the continuation under way")
	resp.Body.Close()
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, m.url) == 0 }, "the router's load back to zero")
	if n := metric(t, m.url, "vllm_router_stream_errors_total"); n != 0 {
		t.Fatalf("a client that left counted %v stream errors", n)
	}
}

// TestMigrationDrainMovesTwentyStreamsWithinTwoSeconds: DELETE
// /workers/{id}?drain=migrate moves a worker's 20 long streams to another
// at their next chunk boundary: the worker leaves within 2 s, no stream
// is cut, and each client reads the uninterrupted text.
func TestMigrationDrainMovesTwentyStreamsWithinTwoSeconds(t *testing.T) {
	m := startMigrationTier(t, 2, "--policy", "round_robin")
	long := strings.Replace(completionBody, `"max_tokens":120`, `"max_tokens":1500`, 1)
	want := streamAll(t, m.url, "/v1/completions", long)
	type result struct {
		s   spliced
		err error
	}
	results := make(chan result, 40)
	opened := make(chan string, 40)
	for range 40 { // round robin: 20 on each worker
		go func() {
			resp, err := http.Post(m.url+"/v1/completions", "application/json", strings.NewReader(long))
			if err != nil {
				opened <- ""
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			s := spliced{ids: map[string]bool{}, created: map[int64]bool{}, worker: resp.Header.Get("x-worker-id")}
			r := bufio.NewReader(resp.Body)
			_, err = s.read(r, 1)
			opened <- s.worker
			if err == nil {
				_, err = s.read(r, -1)
			}
			results <- result{s: s, err: err}
		}()
	}
	on := map[string]int{}
	for range 40 {
		on[<-opened]++
	}
	if on["w1"] != 20 {
		t.Fatalf("streams per worker %v; want 20 on w1", on)
	}
	start := time.Now()
	req, _ := http.NewRequest(http.MethodDelete, m.url+"/workers/"+workerID(t, m.url, m.urls["w1"])+"?drain=migrate", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"streams_left":0`)) || took > 2*time.Second {
		t.Fatalf("drain=migrate answered %d %s after %v; want 200, no stream left, within 2 s", resp.StatusCode, body, took)
	}
	t.Logf("20 streams moved off w1 in %v: %s", took, body)
	for range 40 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		sameAsUninterrupted(t, r.s, want)
	}
	if n := metric(t, m.url, "vllm_router_stream_errors_total"); n != 0 {
		t.Fatalf("%v streams cut", n)
	}
}

// workerID is the registry id of the worker at url.
func workerID(t *testing.T, base, url string) string {
	t.Helper()
	resp, err := http.Get(base + "/workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Workers []struct {
			ID  int    `json:"id"`
			URL string `json:"url"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	for _, w := range list.Workers {
		if w.URL == url {
			return fmt.Sprint(w.ID)
		}
	}
	t.Fatalf("no worker %s in the registry", url)
	return ""
}

// TestMigrationFromAKilledPeerEngine: llm-d-inference-sim, an engine
// nobody here wrote, is killed mid-stream; the stream resumes on a second
// one and the client reads one whole stream: no error, one id, [DONE],
// the text it read before the cut still the start of what it read, and
// the completion tokens of both engines summed. (The simulator's text is
// random: only the splice's continuity can be checked, not its words.)
func TestMigrationFromAKilledPeerEngine(t *testing.T) {
	base, sims := startPeerMigrationTier(t, 2, "--log-level", "debug")
	var urls []string
	for url := range sims {
		urls = append(urls, url)
	}
	killAPeerMidStream(t, base, urls, sims)
	testwait.Eventually(t, 20*time.Second, func() bool { return migrated(t, base, "resumed") == 1 }, "the resume counted")
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, base) == 0 }, "the router's load back to zero")
}

// killAPeerMidStream streams 300 tokens of an essay through base, kills
// the engine among candidates that has the stream in flight after 5
// events, and fails t unless the stream still ends whole: [DONE], one id,
// its text going on from what came before the kill, and the usage of
// every token of max_tokens.
func killAPeerMidStream(t *testing.T, base string, candidates []string, sims map[string]*process) {
	t.Helper()
	body := `{"model":"` + peerModel + `","prompt":"write a long essay about the sea","max_tokens":300,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	resp, r := openStream(t, base, "/v1/completions", body)
	s := spliced{ids: map[string]bool{}, created: map[int64]bool{}}
	if !s.readEvents(t, r, 5) {
		t.Fatal("the stream ended within 5 events")
	}
	before := s.text
	var victim *process
	for _, url := range candidates { // the engine with the request in flight
		if loadOf(t, base, url) > 0 {
			victim = sims[url]
		}
	}
	if victim == nil {
		t.Fatal("no engine had the stream")
	}
	victim.kill()
	s.readEvents(t, r, -1)
	resp.Body.Close()
	switch {
	case !s.done || s.errEvent != "":
		t.Fatalf("the resumed stream ended with done %v, error %q", s.done, s.errEvent)
	case len(s.ids) != 1:
		t.Fatalf("ids %v", s.ids)
	case !strings.HasPrefix(s.text, before) || len(s.text) <= len(before):
		t.Fatalf("text %q does not continue %q", s.text, before)
	case s.usage == nil || s.usage.Completion != 300:
		t.Fatalf("usage %+v; want the 300 completion tokens of both engines", s.usage)
	}
}

// TestMigrationAPDStreamFromAKilledPeerDecodeEngine: vLLM's protocol over
// llm-d-inference-sims, two prefill and two decode engines; the decode
// engine of a stream is killed mid-stream, and the stream goes on through
// a new prefill on the other decode engine, every token of max_tokens.
func TestMigrationAPDStreamFromAKilledPeerDecodeEngine(t *testing.T) {
	urls, sims := startPeerSims(t, 4)
	base := startRouterOver(t, urls, []string{"--vllm-pd-disaggregation", "--prefill", urls[0], "--prefill", urls[1],
		"--decode", urls[2], "--decode", urls[3]})
	killAPeerMidStream(t, base, urls[2:], sims)
	testwait.Eventually(t, 20*time.Second, func() bool { return migrated(t, base, "resumed") == 1 }, "the resume counted")
	if n := metric(t, base, "vllm_router_pd_prefill_requests_total"); n != 2 {
		t.Fatalf("%v prefill requests, want 2: the continuation must go through a prefill", n)
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, base) == 0 }, "the router's load back to zero")
}

// startPeerMigrationTier starts a router with routerArgs in front of n
// llm-d-inference-sims (16 sequences each, 5 ms a token) and returns its
// URL, once every engine is healthy, and the engines by URL.
func startPeerMigrationTier(t *testing.T, n int, routerArgs ...string) (string, map[string]*process) {
	t.Helper()
	urls, sims := startPeerSims(t, n)
	return startRouterOver(t, urls, append([]string{"--worker-urls", strings.Join(urls, ",")}, routerArgs...)), sims
}

// startPeerSims starts n llm-d-inference-sims (16 sequences each, 5 ms a
// token) and returns their URLs, once each answers, and the engines by URL.
func startPeerSims(t *testing.T, n int) ([]string, map[string]*process) {
	t.Helper()
	bin := peers.Sim(t)
	sims := map[string]*process{}
	var urls []string
	for range n {
		addr := freeAddr(t)
		_, port, _ := net.SplitHostPort(addr)
		p := start(t, bin, "--port", port, "--model", peerModel, "--force-dummy-tokenizer", "--max-num-seqs", "16",
			"--latency-calculator", "per-token", "--prefill-time-per-token", "200us", "--inter-token-latency", "5ms")
		url := "http://" + addr
		sims[url] = p
		urls = append(urls, url)
		testwait.EventuallyNil(t, 20*time.Second, func() error {
			resp, err := http.Get(url + "/health")
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		}, "llm-d-inference-sim on %s", addr)
	}
	return urls, sims
}

// startRouterOver starts a router with args and returns its URL once every
// worker of urls is healthy.
func startRouterOver(t *testing.T, urls []string, args []string) string {
	t.Helper()
	router, _ := binaries(t)
	base := startRouterProcess(t, router, args...)
	testwait.Eventually(t, 20*time.Second, func() bool {
		for _, u := range urls {
			if !healthy(t, base, u) {
				return false
			}
		}
		return true
	}, "every engine healthy")
	return base
}

// loadOf is this router's in-flight count on the worker at url.
func loadOf(t *testing.T, base, url string) int64 {
	for _, w := range loads(t, base).Workers {
		if w.URL == url {
			return w.LocalLoad
		}
	}
	return 0
}

// TestMigrationAWorkerRemovedThroughAnotherReplicaMovesItsStreams: in a
// tier of two, a worker is removed through one replica while a stream of
// the other is on it; the other replica, hearing of the removal through
// the registry, moves the stream to the remaining worker, and its client
// reads the uninterrupted run's stream.
func TestMigrationAWorkerRemovedThroughAnotherReplicaMovesItsStreams(t *testing.T) {
	router, workersim := binaries(t)
	urls := map[string]string{}
	var all []string
	for _, id := range []string{"w1", "w2"} {
		_, u := startWorkersim(t, workersim, id, "--time-scale", "1", "--text-seed", "11")
		urls[id] = u
		all = append(all, u)
	}
	routers := startTier(t, router, 2, all)
	for _, r := range routers {
		testwait.Eventually(t, 20*time.Second, func() bool {
			for _, u := range all {
				if s, ok := workerStat(r, u); !ok || !s.Healthy {
					return false
				}
			}
			return true
		}, "every worker healthy on %s", r)
	}
	long := strings.Replace(completionBody, `"max_tokens":120`, `"max_tokens":400`, 1)
	want := streamAll(t, routers[1], "/v1/completions", long)
	got := streamCut(t, routers[1], "/v1/completions", long, 5, func(worker string) {
		req, _ := http.NewRequest(http.MethodDelete, routers[0]+"/workers/"+workerID(t, routers[0], urls[worker]), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("removing %s through the first replica answered %d", worker, resp.StatusCode)
		}
	})
	sameAsUninterrupted(t, got, want)
	if n := migrated(t, routers[1], "resumed"); n != 1 {
		t.Fatalf("the second replica resumed %v streams; want the one moved off the removed worker", n)
	}
}
