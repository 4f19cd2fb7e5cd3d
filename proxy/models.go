package proxy

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/valyala/fasthttp"
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

// served is what a worker's /v1/models lists: every model it serves, and
// those of them that are LoRA adapters (vLLM names an adapter's base model
// as its parent; a base model has none).
type served struct {
	names    []string
	adapters []string
}

// listModels asks worker w what it serves.
func (c *workerCalls) listModels(ctx context.Context, w Worker) (served, error) {
	body, err := c.get(ctx, w, "/v1/models")
	if err != nil {
		return served{}, err
	}
	var list struct {
		Data []struct {
			ID     string `json:"id"`
			Parent string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return served{}, err
	}
	out := served{names: make([]string, 0, len(list.Data))}
	for _, d := range list.Data {
		if d.ID == "" {
			continue
		}
		out.names = append(out.names, d.ID)
		if d.Parent != "" && d.Parent != d.ID {
			out.adapters = append(out.adapters, d.ID)
		}
	}
	return out, nil
}

// equal reports whether s lists what o does, in the same order.
func (s served) equal(o served) bool {
	return slices.Equal(s.names, o.names) && slices.Equal(s.adapters, o.adapters)
}
