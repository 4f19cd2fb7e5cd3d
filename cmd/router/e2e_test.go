package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// These tests run the real binaries: a router process in front of workersim
// processes, all on loopback, as an operator would.

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds router and workersim once per test run.
func binaries(t *testing.T) (router, workersim string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: builds and runs the binaries")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "kvrouter-e2e")
		if buildErr != nil {
			return
		}
		for _, c := range []string{"router", "workersim"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, c), "../"+c).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("building %s: %v\n%s", c, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "router"), filepath.Join(binDir, "workersim")
}

// process is a running binary whose output a test can wait on.
type process struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	tail  outputTail
}

// outputTail keeps the last lines a process printed, so that a failed test
// shows what its processes were doing (lines nobody waited for are
// otherwise dropped).
type outputTail struct {
	mu    sync.Mutex
	lines []string
}

const tailLines = 80

func (o *outputTail) add(line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.lines) == tailLines {
		o.lines = append(o.lines[:0], o.lines[1:]...)
	}
	o.lines = append(o.lines, line)
}

func (o *outputTail) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.lines, "\n")
}

func start(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	return startWithEnv(t, nil, bin, args...)
}

// startWithEnv is start with env added to the process's environment.
func startWithEnv(t *testing.T, env []string, bin string, args ...string) *process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.tail.add(sc.Text())
			select {
			case p.lines <- sc.Text():
			default: // nobody is waiting for more output
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
		if t.Failed() {
			t.Logf("the last lines of %s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), &p.tail)
		}
	})
	return p
}

// await returns the first submatch of the first output line matching re.
func (p *process) await(t *testing.T, re string) string {
	t.Helper()
	m, err := p.awaitLine(re)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// awaitLine is await that reports a process that exits or stays silent as an error.
func (p *process) awaitLine(re string) (string, error) {
	rx := regexp.MustCompile(re)
	deadline := time.After(20 * time.Second)
	for {
		select {
		case line := <-p.lines:
			if m := rx.FindStringSubmatch(line); m != nil {
				return m[1], nil
			}
		case <-p.done:
			return "", fmt.Errorf("process exited before printing %q", re)
		case <-deadline:
			return "", fmt.Errorf("no output line matched %q", re)
		}
	}
}

// kill stops the process at once, as a crash would.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func startWorkersim(t *testing.T, bin, id string, args ...string) (*process, string) {
	t.Helper()
	p := start(t, bin, append([]string{"--port", "0", "--worker-id", id, "--time-scale", "50"}, args...)...)
	return p, "http://" + p.await(t, `^listening on (\S+)`)
}

func startRouterProcess(t *testing.T, bin string, args ...string) string {
	t.Helper()
	p := startRouterProcessKeep(t, bin, args...)
	return "http://" + p.await(t, `router ready" addr=(\S+)`)
}

// startRouterProcessKeep starts a lone router with args and returns its
// process (await its "router ready" line for its address).
func startRouterProcessKeep(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	base := []string{"serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--node-name", "e2e", "--retry-initial-backoff-ms", "1"}
	return start(t, bin, append(base, args...)...)
}

type completion struct {
	worker string
	cached int
	body   string
	status int
}

func complete(t *testing.T, url, prompt string, stream bool) completion {
	t.Helper()
	body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":8,"stream":%v,"stream_options":{"include_usage":true}}`, prompt, stream)
	return postCompletion(t, url, []byte(body))
}

// postCompletion posts body to url's /v1/completions.
func postCompletion(t *testing.T, url string, body []byte) completion {
	t.Helper()
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	c := completion{worker: resp.Header.Get("x-worker-id"), body: string(b), status: resp.StatusCode}
	if m := regexp.MustCompile(`"cached_tokens":(\d+)`).FindAllStringSubmatch(c.body, -1); m != nil {
		fmt.Sscan(m[len(m)-1][1], &c.cached)
	}
	return c
}

func TestEndToEndAffinityAndCacheHits(t *testing.T) {
	router, workersim := binaries(t)
	var urls []string
	for i := range 3 {
		_, u := startWorkersim(t, workersim, fmt.Sprint("w", i))
		urls = append(urls, u)
	}
	url := startRouterProcess(t, router, "--worker-urls", strings.Join(urls, ","))
	conv := strings.Repeat("You are a careful agent. Solve the task step by step. ", 40)
	first := complete(t, url, conv, false)
	for turn := range 4 {
		conv += fmt.Sprintf(" Observation %d: the tool returned a long listing of files and their sizes.", turn)
		c := complete(t, url, conv, turn%2 == 0)
		if c.status != 200 || c.worker != first.worker {
			t.Fatalf("turn %d: %d from %q, first turn on %q: %s", turn, c.status, c.worker, first.worker, c.body)
		}
		if c.cached == 0 {
			t.Fatalf("turn %d: no cached tokens reported: %s", turn, c.body)
		}
	}
}

func TestEndToEndStreamEndsWithDone(t *testing.T) {
	router, workersim := binaries(t)
	_, u := startWorkersim(t, workersim, "w0")
	url := startRouterProcess(t, router, "--worker-urls", u)
	c := complete(t, url, "hello there", true)
	if c.status != 200 || strings.Count(c.body, "data: ") < 9 || !strings.HasSuffix(c.body, "data: [DONE]\n\n") {
		t.Fatalf("stream %d: %q", c.status, c.body)
	}
}

func TestEndToEndRetriesAroundAFailingWorker(t *testing.T) {
	router, workersim := binaries(t)
	_, bad := startWorkersim(t, workersim, "bad", "--fault", `{"mode":"errors","rate":1}`)
	_, good := startWorkersim(t, workersim, "good")
	url := startRouterProcess(t, router, "--worker-urls", bad+","+good)
	for i := range 5 {
		if c := complete(t, url, fmt.Sprint("prompt number ", i), false); c.status != 200 || c.worker != "good" {
			t.Fatalf("request %d: %d from %q", i, c.status, c.worker)
		}
	}
}

// TestEndToEndClientDisconnectCancelsTheEngine: the worker must hear of a
// client that left mid-stream, and the router's load must return to zero.
func TestEndToEndClientDisconnectCancelsTheEngine(t *testing.T) {
	router, workersim := binaries(t)
	_, u := startWorkersim(t, workersim, "w0", "--time-scale", "1")
	url := startRouterProcess(t, router, "--worker-urls", u)
	body := `{"model":"sim-model","prompt":"tell me a long story","max_tokens":2000,"stream":true}`
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	testwait.Eventually(t, 20*time.Second, func() bool {
		return metric(t, u, "workersim_requests_cancelled_total") >= 1
	}, "the worker to count a cancellation")
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, url) == 0 }, "the router's load back to zero")
}

// TestEndToEndDeadWorkerIsTakenOutOfRotation: a killed worker fails its
// health checks and gets no more traffic.
func TestEndToEndDeadWorkerIsTakenOutOfRotation(t *testing.T) {
	router, workersim := binaries(t)
	victim, dead := startWorkersim(t, workersim, "victim")
	_, alive := startWorkersim(t, workersim, "alive")
	url := startRouterProcess(t, router, "--worker-urls", dead+","+alive,
		"--health-check-interval-secs", "1", "--health-check-timeout-secs", "1", "--health-failure-threshold", "1")
	victim.kill()
	testwait.Eventually(t, 20*time.Second, func() bool { return !healthy(t, url, dead) }, "the dead worker to be marked unhealthy")
	for i := range 4 {
		if c := complete(t, url, fmt.Sprint("after the crash ", i), false); c.status != 200 || c.worker != "alive" {
			t.Fatalf("request %d: %d from %q", i, c.status, c.worker)
		}
	}
}

func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	v, _ := scrapedMetric(base, name)
	return v
}

// scrapedMetric is metric, and whether base's /metrics has the series.
func scrapedMetric(base, name string) (float64, bool) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return -1, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") {
			var v float64
			fmt.Sscan(strings.TrimPrefix(line, name+" "), &v)
			return v, true
		}
	}
	return 0, false
}

type loadsReply struct {
	Workers []struct {
		URL       string `json:"url"`
		LocalLoad int64  `json:"local_load"`
		Healthy   bool   `json:"healthy"`
	} `json:"workers"`
}

func loads(t *testing.T, base string) loadsReply {
	t.Helper()
	resp, err := http.Get(base + "/get_loads")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r loadsReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

func totalLoad(t *testing.T, base string) int64 {
	var n int64
	for _, w := range loads(t, base).Workers {
		n += w.LocalLoad
	}
	return n
}

func healthy(t *testing.T, base, worker string) bool {
	for _, w := range loads(t, base).Workers {
		if w.URL == worker {
			return w.Healthy
		}
	}
	t.Fatalf("worker %s not in /get_loads", worker)
	return false
}

// TestEndToEndAWorkerKilledMidStreamIsAnErrorForCurl: a stream whose engine
// dies after the first event must not end like a complete one: curl exits
// with an error, and the router counts a stream error.
func TestEndToEndAWorkerKilledMidStreamIsAnErrorForCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed")
	}
	router, workersim := binaries(t)
	victim, u := startWorkersim(t, workersim, "victim", "--time-scale", "1")
	url := startRouterProcess(t, router, "--worker-urls", u)
	body := `{"model":"sim-model","prompt":"tell me a long story","max_tokens":2000,"stream":true}`
	cmd := exec.Command(curl, "-sSN", "--max-time", "30", "-H", "Content-Type: application/json", "-d", body, url+"/v1/completions")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(out)
	if line, err := lines.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q %v", line, err)
	}
	victim.kill()
	rest, _ := io.ReadAll(lines)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("curl ended with %v after %q; want a failed transfer", err, rest)
	}
	if !strings.Contains(string(rest), `data: {"error":`) {
		t.Fatalf("no error event in %q", rest)
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return metric(t, url, "vllm_router_stream_errors_total") == 1 }, "the stream error to be counted")
	testwait.Eventually(t, 20*time.Second, func() bool { return totalLoad(t, url) == 0 }, "the router's load back to zero")
}
