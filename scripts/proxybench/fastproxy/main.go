// Command fastproxy is the proxy benchmark's reference for fasthttp's own
// upstream path: a fasthttp server whose handler passes each request to one
// upstream through a fasthttp.HostClient and its answer back, whole. It
// does what any reverse proxy must (hop-by-hop headers dropped, keep-alive
// connections to the upstream) and nothing the router does beyond that (no
// routing, no JSON parsing, no client watch, no retries), so the router's
// distance from it is what its own request path costs.
//
//	fastproxy --addr 127.0.0.1:8080 --upstream 127.0.0.1:9000 [--debug-addr 127.0.0.1:6060]
//
// --debug-addr serves the Go runtime's profiles and counters
// (/debug/pprof/), as the router's flag of the same name does, so that the
// proxy benchmark's cost.sh can profile both the same way.
package main

import (
	"flag"
	"log"
	"net/http"
	_ "net/http/pprof" // served on --debug-addr only

	"github.com/valyala/fasthttp"
)

var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback host:port to listen on")
	upstream := flag.String("upstream", "", "host:port of the upstream")
	debug := flag.String("debug-addr", "", "loopback host:port for /debug/pprof/; empty: none")
	flag.Parse()
	if *debug != "" {
		go func() { log.Fatal(http.ListenAndServe(*debug, nil)) }()
	}
	hc := &fasthttp.HostClient{Addr: *upstream, MaxConns: 1024}
	handler := func(ctx *fasthttp.RequestCtx) {
		req := &ctx.Request
		for _, h := range hopHeaders {
			req.Header.Del(h)
		}
		if err := hc.Do(req, &ctx.Response); err != nil {
			ctx.Error("upstream: "+err.Error(), fasthttp.StatusBadGateway)
			return
		}
		for _, h := range hopHeaders {
			ctx.Response.Header.Del(h)
		}
	}
	s := &fasthttp.Server{Handler: handler, Name: "fastproxy", MaxRequestBodySize: 512 << 20, NoDefaultServerHeader: true}
	log.Fatal(s.ListenAndServe(*addr))
}
