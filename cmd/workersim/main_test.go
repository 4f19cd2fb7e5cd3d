package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/sim"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp refreshes its Date header from a process-wide goroutine that never ends,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// and a stopped server's idle-worker cleaner notices the stop only after its 10 s nap.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// and the ZMQ library's PUB socket never stops its writer goroutine on Close (one per
		// KV-event publisher, for the life of the process).
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

// testWorker is a workersim served in-process on a loopback port.
type testWorker struct {
	t      *testing.T
	s      *server
	addr   string
	url    string
	client *http.Client
	exits  chan int
}

// testConfig is a worker running 100x faster than real time.
func testConfig() serverConfig {
	return serverConfig{
		host: "127.0.0.1", models: []string{"sim-model"}, engine: sim.DefaultConfig(),
		timeScale: 100, role: roleBoth, fault: fault{Mode: faultNone}, seed: 1,
		embeddingDims: defaultEmbeddingDims, maxStoredResponses: defaultMaxStoredResponses,
		healthGenerateTimeout: defaultHealthGenerateTimeout,
	}
}

func startWorker(t *testing.T, cfg serverConfig) *testWorker {
	t.Helper()
	return startWorkerOn(t, cfg, clock.RealClock{})
}

// startWorkerOn starts a worker whose engine runs on clk.
func startWorkerOn(t *testing.T, cfg serverConfig, clk clock.Clock) *testWorker {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	exits := make(chan int, 4)
	s, err := newServer(cfg, ln.Addr(), clk, func(code int) { exits <- code })
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	w := &testWorker{t: t, s: s, addr: ln.Addr().String(), url: "http://" + ln.Addr().String(),
		client: &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}, exits: exits}
	t.Cleanup(func() {
		w.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ln.Close() // as run does: Serve may not have taken up the listener yet
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return w
}

// post sends a JSON body and returns the status, the x-worker-id header and the body.
func (w *testWorker) post(path, body string) (int, http.Header, []byte) {
	w.t.Helper()
	resp, err := w.client.Post(w.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		w.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatalf("POST %s: reading body: %v", path, err)
	}
	return resp.StatusCode, resp.Header, b
}

func (w *testWorker) get(path string) (int, http.Header, []byte) {
	w.t.Helper()
	resp, err := w.client.Get(w.url + path)
	if err != nil {
		w.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatalf("GET %s: reading body: %v", path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// metric returns the value of the exposed metric with exactly this name and labels.
func (w *testWorker) metric(name string) float64 {
	w.t.Helper()
	_, _, body := w.get(pathMetrics)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				w.t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	w.t.Fatalf("metric %s not exposed in\n%s", name, body)
	return 0
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, 10*time.Second, cond, "%s", what)
}

// completion is the part of an OpenAI response the tests read.
type completion struct {
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	KVTransferParams *struct {
		DoRemotePrefill bool   `json:"do_remote_prefill"`
		DoRemoteDecode  bool   `json:"do_remote_decode"`
		RemoteEngineID  string `json:"remote_engine_id"`
		RemoteBlockIDs  []int  `json:"remote_block_ids"`
		RemoteHost      string `json:"remote_host"`
		RemotePort      int    `json:"remote_port"`
	} `json:"kv_transfer_params"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func decode(t *testing.T, body []byte) completion {
	t.Helper()
	var c completion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, body)
	}
	return c
}

// longPrompt returns a prompt of n bytes that no prompt of another tag shares.
func longPrompt(tag string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s-%d ", tag, i)
	}
	return b.String()[:n]
}

// rawRequest opens a connection and sends one HTTP/1.1 POST on it.
func rawRequest(t *testing.T, addr, path, body string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, addr, len(body), body)
	return conn, bufio.NewReader(conn)
}
