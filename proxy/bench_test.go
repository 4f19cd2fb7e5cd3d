package proxy

// Benchmarks of the whole request path over loopback: a fasthttp client, the
// proxy, and an upstream that answers at once, so that the proxy is the
// bottleneck. BenchmarkDirect is the same client and upstream without the
// proxy: the difference between the two is what the proxy costs, in time
// and in allocations per request.
//
//	go test -run '^$' -bench 'BenchmarkProxy|BenchmarkDirect' -benchmem -cpuprofile cpu.out ./proxy/

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
)

// benchCompletion is what the instant upstream answers: a chat completion
// of the size vLLM answers a short request with.
const benchCompletion = `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"m",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog."},` +
	`"finish_reason":"stop"}],"usage":{"prompt_tokens":1024,"completion_tokens":12,"total_tokens":1036}}`

// benchEvents is how many SSE events the streaming upstream writes.
const benchEvents = 1000

// benchChatBody is a chat request of about size bytes: a system prompt
// and a user turn, the shape an agent sends.
func benchChatBody(size int, stream bool) []byte {
	filler := strings.Repeat("You are a careful assistant. ", size/29+1)[:max(size-160, 16)]
	return fmt.Appendf(nil, `{"model":"m","stream":%v,"max_tokens":16,"messages":[{"role":"system","content":%q},`+
		`{"role":"user","content":"Summarise the conversation so far."}]}`, stream, filler)
}

// instantUpstream answers every request at once: the fixed completion, or,
// for a streaming request, benchEvents SSE events written one by one.
func instantUpstream(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if !bytes.Contains(ctx.PostBody(), []byte(`"stream":true`)) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(benchCompletion)
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(writeBenchEvents)
	}}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return ln.Addr().String()
}

var benchEvent = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"}}]}` + "\n\n")

func writeBenchEvents(w *bufio.Writer) {
	for range benchEvents {
		_, _ = w.Write(benchEvent)
		if w.Flush() != nil {
			return
		}
	}
	_, _ = w.WriteString("data: [DONE]\n\n")
}

// benchProxy is a cache_aware proxy with the default block size in front
// of upstream, on loopback.
func benchProxy(b *testing.B, upstream string) string {
	b.Helper()
	loads := affinity.NewLoadTable(nil)
	index := affinity.NewIndex(clock.RealClock{}, 1<<16)
	policy, err := affinity.NewPolicy(affinity.Settings{Policy: affinity.PolicyCacheAware, Thresholds: affinity.DefaultThresholds(),
		MissPlacement: affinity.PlaceLeastPrefill, BlockSize: affinity.DefaultBlockSize}, index)
	if err != nil {
		b.Fatal(err)
	}
	router := affinity.NewRouter(policy, loads, index, affinity.DefaultBlockSize, nil)
	p, err := New(Config{}, Deps{Loads: loads, Index: index, Router: router, Metrics: metrics.NewSet(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	p.Fleet().SetWorkers([]Worker{{ID: 1, URL: "http://" + upstream, Role: RoleRegular}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Serve(ln) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String()
}

// drive sends b.N requests with body to addr over parallel keep-alive
// connections, one per client goroutine, and fails on any answer but a 200
// with a body. Each client reuses its request, response and buffers, so the
// client side allocates nothing per request.
func drive(b *testing.B, addr string, body []byte) {
	b.Helper()
	b.SetBytes(int64(len(body)))
	b.SetParallelism(16) // 16 clients per GOMAXPROCS, as a load generator's connections
	b.ReportAllocs()
	cpu := processCPU()
	b.ResetTimer()
	defer func() { b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close()
		br, bw := bufio.NewReaderSize(conn, 64<<10), bufio.NewWriterSize(conn, 64<<10)
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.Header.SetMethod("POST")
		req.SetRequestURI("/v1/chat/completions")
		req.Header.SetHost(addr)
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
		for pb.Next() {
			if err := roundTripOnce(br, bw, req, resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// processCPU is the CPU time this process has spent, user and system, in
// nanoseconds: on a machine shared with other work it says more about a
// request's cost than the wall time does.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func roundTripOnce(br *bufio.Reader, bw *bufio.Writer, req *fasthttp.Request, resp *fasthttp.Response) error {
	if err := req.Write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := resp.Read(br); err != nil {
		return err
	}
	if resp.StatusCode() != 200 || len(resp.Body()) == 0 {
		return fmt.Errorf("status %d body %q", resp.StatusCode(), resp.Body())
	}
	return nil
}

var benchSizes = []int{4 << 10, 64 << 10}

func sizeName(n int) string { return "body=" + strconv.Itoa(n>>10) + "KiB" }

// BenchmarkProxy is one non-streamed chat request through the proxy.
func BenchmarkProxy(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			drive(b, benchProxy(b, instantUpstream(b)), benchChatBody(size, false))
		})
	}
}

// BenchmarkDirect is BenchmarkProxy's client and upstream without the proxy.
func BenchmarkDirect(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			drive(b, instantUpstream(b), benchChatBody(size, false))
		})
	}
}

// BenchmarkProxyStream is one stream of benchEvents SSE events through the
// proxy; BenchmarkDirectStream the same without it.
func BenchmarkProxyStream(b *testing.B) {
	drive(b, benchProxy(b, instantUpstream(b)), benchChatBody(4<<10, true))
}

func BenchmarkDirectStream(b *testing.B) {
	drive(b, instantUpstream(b), benchChatBody(4<<10, true))
}

// BenchmarkUsageOf is reading the usage of a whole answer, which every
// non-streamed answer pays: one without cached tokens (the proxy
// benchmark's upstream) and one with them (vLLM's usage details).
func BenchmarkUsageOf(b *testing.B) {
	for name, body := range map[string]string{
		"uncached": `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,` +
			`"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog."},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":1024,"completion_tokens":12,"total_tokens":1036}}`,
		"cached": `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant",` +
			`"content":"The quick brown fox jumps over the lazy dog."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1024,` +
			`"completion_tokens":12,"total_tokens":1036,"prompt_tokens_details":{"cached_tokens":768}}}`,
	} {
		answer := []byte(body)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if usageOf(answer).PromptTokens != 1024 {
					b.Fatal("no prompt tokens")
				}
			}
		})
	}
}
