package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

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

// discoverModels asks workers that declare no model in the registry what
// they serve (their /v1/models), so requests for other models get a 404
// instead of reaching them. A worker that does not answer keeps serving any
// model and is asked again at the next round.
func (p *Proxy) discoverModels(ctx context.Context) {
	t := time.NewTicker(discoverInterval)
	defer t.Stop()
	for {
		for _, w := range p.fleet.undiscovered() {
			if models, err := p.listModels(ctx, w); err == nil {
				p.fleet.setDiscovered(w.ID, models)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.fleet.changed():
		}
	}
}

// discoverInterval is how often workers of unknown models are asked again.
const discoverInterval = 10 * time.Second

func (p *Proxy) listModels(ctx context.Context, w Worker) ([]string, error) {
	m := p.fleet.view().members[w.ID]
	if m == nil {
		return nil, errorf(ErrNoWorker, "worker %d left the registry", w.ID)
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.SetHost(m.host)
	req.SetRequestURI("/v1/models")
	conn, err := m.up.exchange(ctx, req, resp, time.Now().Add(p.cfg.DialTimeout))
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.BodyStream())
	_ = resp.CloseBodyStream()
	m.up.release(conn, err == nil && !resp.ConnectionClose())
	if err != nil {
		return nil, err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, fmt.Errorf("%s/v1/models answered %d", w.URL, resp.StatusCode())
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	models := make([]string, 0, len(list.Data))
	for _, d := range list.Data {
		if d.ID != "" {
			models = append(models, d.ID)
		}
	}
	return models, nil
}
