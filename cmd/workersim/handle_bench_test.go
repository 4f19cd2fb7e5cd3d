package main

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"
	"k8s.io/utils/clock"
)

// benchServe measures the worker's own cost of answering one request: parsing, the engine
// round trips and rendering, with the engine running a million times faster than real time and
// no sockets involved.
func benchServe(b *testing.B, path, body string) {
	cfg := testConfig()
	cfg.timeScale = 1e6
	s, err := newServer(cfg, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, clock.RealClock{}, func(int) {})
	if err != nil {
		b.Fatal(err)
	}
	defer s.driver.Stop()
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod(fasthttp.MethodPost)
		ctx.Request.SetRequestURI(path)
		ctx.Request.SetBodyString(body)
		s.handle(&ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			b.Fatal(ctx.Response.StatusCode(), string(ctx.Response.Body()))
		}
	}
}

func BenchmarkHandleCompletion(b *testing.B) {
	benchServe(b, pathCompletions, `{"prompt":"hello there","max_tokens":4}`)
}

func BenchmarkHandleEmbeddings(b *testing.B) {
	benchServe(b, pathEmbeddings, `{"input":["hello there","general kenobi"]}`)
}

func BenchmarkHandleResponses(b *testing.B) {
	benchServe(b, pathResponses, `{"input":"hello there","max_output_tokens":4,"store":false}`)
}
