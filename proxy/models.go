package proxy

import (
	"encoding/json"
	"slices"

	"github.com/valyala/fasthttp"
)

// serveModels answers GET /v1/models with the union of the models the
// registered workers declare.
func (p *Proxy) serveModels(ctx *fasthttp.RequestCtx) {
	seen := map[string]bool{}
	for _, m := range p.fleet.view().ordered {
		if m.Model != "" {
			seen[m.Model] = true
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	slices.Sort(names)
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, n := range names {
		list.Data = append(list.Data, model{ID: n, Object: "model", OwnedBy: "kvrouter"})
	}
	body, _ := json.Marshal(list)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}
