package cluster

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// The debug listener (--debug-addr) serves Go's runtime profiles
// (net/http/pprof under /debug/pprof/) for profiling a replica under real
// load. It is off by default and binds only loopback addresses: a profile
// shows the process's memory and code paths, and a CPU profile costs CPU
// while it runs, so it is never exposed beyond the host.

// validDebugAddr refuses a --debug-addr that is not host:port on a loopback
// address. The address is never contacted.
func validDebugAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return flagErr("debug-addr", "want host:port on loopback, such as 127.0.0.1:6060 (got %q)", addr)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return flagErr("debug-addr", "%q is not a loopback address: the profiles are served on loopback only", host)
	}
	return nil
}

// debugHandler is the profiles' mux; it serves nothing else.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveDebug answers the profiles on ln until ctx ends. A CPU profile or
// trace under way is cut short then.
func serveDebug(ctx context.Context, ln net.Listener) {
	srv := &http.Server{Handler: debugHandler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	<-ctx.Done()
	_ = srv.Close()
	<-done
}
