package cluster

import (
	"context"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
)

// rpcTimeout bounds reading a request and writing an answer on the cluster
// port's HTTP (link.Serve, link.Client); a forwarded write waits up to
// admin.DefaultApplyTimeout for its commit in between.
const rpcTimeout = admin.DefaultApplyTimeout + 5*time.Second

// serveRPC answers the peers' HTTP on the cluster port until ctx ends.
// routes maps a path to its handler; other paths are 404.
func serveRPC(ctx context.Context, port *link.Port, routes map[string]fasthttp.RequestHandler) {
	h := func(c *fasthttp.RequestCtx) {
		h, ok := routes[string(c.Path())]
		if !ok {
			admin.WriteError(c, admin.Refusal(http.StatusNotFound, "not_found_error", "no cluster endpoint "+string(c.Path())))
			return
		}
		h(c)
	}
	link.Serve(ctx, port.RPCListener(), h, link.ServerLimits{Timeout: rpcTimeout, MaxBody: admin.MaxBody})
}

// rpcRoutes are the endpoints of the cluster port's HTTP, all POST.
func (r *Replica) rpcRoutes() map[string]fasthttp.RequestHandler {
	routes := map[string]fasthttp.RequestHandler{
		raftnode.ApplyPath: postOnly(func(c *fasthttp.RequestCtx) { r.admin.ApplyForwarded(c, 0) }),
		keyringPath:        postOnly(r.keyrings.serveLocal),
	}
	if r.placer != nil {
		routes[placePath] = postOnly(r.placer.servePlace)
	}
	if r.kv != nil {
		routes[kvSnapshotPath] = postOnly(r.kv.serveSnapshots)
	}
	if r.tokens != nil {
		routes[tokensFindPath] = postOnly(serveFindTokens(r.proxy))
		routes[tokensKeepPath] = postOnly(serveKeepTokens(r.proxy))
	}
	return routes
}

func postOnly(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		if !c.IsPost() {
			c.Response.Header.Set("Allow", http.MethodPost)
			admin.WriteError(c, admin.Refusal(http.StatusMethodNotAllowed, "invalid_request_error", "only POST here"))
			return
		}
		h(c)
	}
}
