package cluster

import (
	"context"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
)

// rpcTimeout bounds reading a request and writing an answer on the cluster
// port's HTTP (link.Serve, link.Client); a forwarded write waits up to
// DefaultAdminApplyTimeout for its commit in between.
const rpcTimeout = DefaultAdminApplyTimeout + 5*time.Second

// serveRPC answers the peers' HTTP on the cluster port until ctx ends.
// routes maps a path to its handler; other paths are 404.
func serveRPC(ctx context.Context, port *link.Port, routes map[string]fasthttp.RequestHandler) {
	h := func(c *fasthttp.RequestCtx) {
		h, ok := routes[string(c.Path())]
		if !ok {
			writeError(c, &statusError{http.StatusNotFound, "not_found_error", "no cluster endpoint " + string(c.Path())})
			return
		}
		h(c)
	}
	link.Serve(ctx, port.RPCListener(), h, link.ServerLimits{Timeout: rpcTimeout, MaxBody: maxAdminBody})
}

// rpcRoutes are the endpoints of the cluster port's HTTP, all POST.
func (r *Replica) rpcRoutes() map[string]fasthttp.RequestHandler {
	return map[string]fasthttp.RequestHandler{
		raftnode.ApplyPath: postOnly(func(c *fasthttp.RequestCtx) { r.admin.applyForwarded(c, 0) }),
		keyringPath:        postOnly(r.serveLocalKeyring),
	}
}

func postOnly(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		if !c.IsPost() {
			c.Response.Header.Set("Allow", http.MethodPost)
			writeError(c, &statusError{http.StatusMethodNotAllowed, "invalid_request_error", "only POST here"})
			return
		}
		h(c)
	}
}
