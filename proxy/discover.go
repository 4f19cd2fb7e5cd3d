package proxy

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// discoverInterval is how often workers whose models or KV capacity are not
// known yet are asked again.
const discoverInterval = 10 * time.Second

// discover learns what the registry does not say about a worker: the models
// it serves (its /v1/models, when the registry declares none, or at every
// round when models are refreshed: LoRAConfig.ModelRefresh) and its KV
// cache capacity (vLLM's vllm:cache_config_info on /metrics), which becomes
// its budget in the ownership index, so the index forgets about when the
// engine does. A worker that does not answer is asked again next round.
func (p *Proxy) discover(ctx context.Context) {
	every := discoverInterval
	if r := p.cfg.LoRA.ModelRefresh; r > 0 {
		every = r
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, w := range p.fleet.undiscovered() {
			if models, err := p.listModels(ctx, w); err == nil {
				p.fleet.setDiscovered(w.ID, models)
			}
		}
		for _, w := range p.fleet.unmeasured() {
			if tokens, err := p.kvCapacity(ctx, w); err == nil {
				p.fleet.setMeasured(w.ID)
				p.setBudget(w, tokens)
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

// bytesPerToken converts the engine's capacity in tokens to bytes of routing
// text, the index's unit (about 4 bytes a token).
const bytesPerToken = 4

func (p *Proxy) setBudget(w Worker, tokens int64) {
	if p.deps.Index == nil || p.cfg.BlockSize <= 0 || tokens <= 0 {
		return
	}
	blocks := tokens * bytesPerToken / int64(p.cfg.BlockSize)
	p.deps.Index.SetBudget(w.ID, int(max(blocks, 1)))
	p.log.Debug("worker KV capacity", "worker", w.URL, "tokens", tokens, "index_blocks", blocks)
}

var cacheConfigInfo = regexp.MustCompile(`(?m)^vllm:cache_config_info\{([^}]*)\}`)
var labelValue = regexp.MustCompile(`(\w+)="([^"]*)"`)

// kvCapacity reads a worker's KV capacity in tokens from its metrics:
// num_gpu_blocks x block_size of vllm:cache_config_info.
func (p *Proxy) kvCapacity(ctx context.Context, w Worker) (int64, error) {
	body, err := p.get(ctx, w, "/metrics")
	if err != nil {
		return 0, err
	}
	return parseKVCapacity(body)
}

func parseKVCapacity(metrics []byte) (int64, error) {
	m := cacheConfigInfo.FindSubmatch(metrics)
	if m == nil {
		return 0, fmt.Errorf("no vllm:cache_config_info")
	}
	labels := map[string]string{}
	for _, kv := range labelValue.FindAllSubmatch(m[1], -1) {
		labels[string(kv[1])] = string(kv[2])
	}
	blocks, err1 := strconv.ParseInt(labels["num_gpu_blocks"], 10, 64)
	size, err2 := strconv.ParseInt(labels["block_size"], 10, 64)
	if err1 != nil || err2 != nil || blocks <= 0 || size <= 0 {
		return 0, fmt.Errorf("vllm:cache_config_info lacks num_gpu_blocks or block_size")
	}
	return blocks * size, nil
}

// maxDiscoveryBody bounds what the router reads of a worker's answer to its
// own requests (/v1/models, /metrics, a stored response looked for): a vLLM
// metrics page is some hundreds of kilobytes.
const maxDiscoveryBody = 4 << 20

// get fetches path from worker w over its pooled connections; any status
// but 200 is an error.
func (p *Proxy) get(ctx context.Context, w Worker, path string) ([]byte, error) {
	body, status, err := p.call(ctx, w, fasthttp.MethodGet, path, nil)
	if err == nil && status != fasthttp.StatusOK {
		err = fmt.Errorf("%s%s answered %d", w.URL, path, status)
	}
	return body, err
}

// post sends an empty POST to path of worker w and returns its status.
func (p *Proxy) post(ctx context.Context, w Worker, path string) (int, error) {
	_, status, err := p.call(ctx, w, fasthttp.MethodPost, path, nil)
	return status, err
}

// call sends a request to path of worker w (under its base path, with
// --api-key), with body as JSON when there is one, and reads at most
// maxDiscoveryBody of the answer.
func (p *Proxy) call(ctx context.Context, w Worker, method, path string, body []byte) ([]byte, int, error) {
	m := p.fleet.view().members[w.ID]
	if m == nil {
		return nil, 0, errorf(ErrNoWorker, "worker %d left the registry", w.ID)
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.Header.SetHost(m.addr)
	req.SetRequestURI(m.base.Under(path))
	if p.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	if body != nil {
		req.Header.SetContentType("application/json")
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	answer, status, err := m.exchangeBody(ctx, req, body, resp, maxDiscoveryBody)
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return nil, 0, fmt.Errorf("%s answered more than %d bytes", path, maxDiscoveryBody)
	case err != nil:
		return nil, 0, err
	}
	return append([]byte(nil), answer...), status, nil
}
