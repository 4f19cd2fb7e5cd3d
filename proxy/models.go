package proxy

import (
	"context"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/proxy/catalog"
)

// serveModels answers GET /v1/models with the union of the models the
// registered workers serve.
func (p *Proxy) serveModels(ctx *fasthttp.RequestCtx) {
	seen := map[string]bool{}
	for _, m := range p.fleet.view().ordered {
		for _, name := range m.models {
			seen[name] = true
		}
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(catalog.ListBody(seen))
}

// listModels asks worker w what it serves.
func (c *workerCalls) listModels(ctx context.Context, w Worker) (catalog.Served, error) {
	body, err := c.get(ctx, w, "/v1/models")
	if err != nil {
		return catalog.Served{}, err
	}
	return catalog.Parse(body)
}
