package proxy

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/failure"
)

// flushTimeout bounds the whole fan-out of POST /flush_cache.
const flushTimeout = 30 * time.Second

// ServeFlushCache empties the prefix cache of every registered worker
// (SGLang's POST /flush_cache, else vLLM's POST /reset_prefix_cache) and
// forgets their prefixes in the index, since the engines no longer hold
// them. It answers 200 when every worker flushed, else 502 naming the ones
// that did not.
func (p *Proxy) ServeFlushCache(ctx *fasthttp.RequestCtx) {
	fctx, cancel := context.WithTimeout(p.ctx, flushTimeout)
	defer cancel()
	members := p.fleet.view().ordered
	results := make([]flushResult, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = flushResult{Worker: m.ID, URL: m.URL}
			if err := p.flush(fctx, m.Worker); err != nil {
				results[i].Error = err.Error()
				return
			}
			if p.deps.Index != nil {
				p.deps.Index.Forget(m.ID)
			}
		}()
	}
	wg.Wait()
	status := fasthttp.StatusOK
	for _, r := range results {
		if r.Error != "" {
			status = fasthttp.StatusBadGateway
		}
	}
	body, _ := json.Marshal(map[string]any{"workers": results})
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

type flushResult struct {
	Worker affinity.WorkerID `json:"id"`
	URL    string            `json:"url"`
	Error  string            `json:"error,omitempty"`
}

// flush asks one worker to empty its prefix cache, in SGLang's words or
// vLLM's.
func (p *Proxy) flush(ctx context.Context, w Worker) error {
	status, err := p.calls.post(ctx, w, "/flush_cache")
	if err == nil && status == fasthttp.StatusNotFound {
		status, err = p.calls.post(ctx, w, "/reset_prefix_cache")
	}
	switch {
	case err != nil:
		return err
	case status/100 != 2:
		return failure.Errorf(failure.ErrUpstream, "worker %d answered %d", w.ID, status)
	}
	return nil
}
