package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/proxy/failure"
)

// maxDiscoveryBody bounds what the router reads of a worker's answer to its
// own requests (/v1/models, /metrics, a stored response looked for): a vLLM
// metrics page is some hundreds of kilobytes.
const maxDiscoveryBody = 4 << 20

// workerCalls are the router's own requests to its workers (discovery,
// stored-response lookups, cache flushes, adapter loads), over each
// worker's pooled connections, with --api-key, bounded in time and size.
type workerCalls struct {
	fleet   *Fleet
	apiKey  string
	timeout time.Duration
}

// get fetches path from worker w over its pooled connections; any status
// but 200 is an error.
func (c *workerCalls) get(ctx context.Context, w Worker, path string) ([]byte, error) {
	body, status, err := c.call(ctx, w, fasthttp.MethodGet, path, nil)
	if err == nil && status != fasthttp.StatusOK {
		err = fmt.Errorf("%s%s answered %d", w.URL, path, status)
	}
	return body, err
}

// post sends an empty POST to path of worker w and returns its status.
func (c *workerCalls) post(ctx context.Context, w Worker, path string) (int, error) {
	_, status, err := c.call(ctx, w, fasthttp.MethodPost, path, nil)
	return status, err
}

// call sends a request to path of worker w (under its base path, with
// --api-key), with body as JSON when there is one, and reads at most
// maxDiscoveryBody of the answer.
func (c *workerCalls) call(ctx context.Context, w Worker, method, path string, body []byte) ([]byte, int, error) {
	m := c.fleet.view().members[w.ID]
	if m == nil {
		return nil, 0, failure.Errorf(failure.ErrNoWorker, "worker %d left the registry", w.ID)
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.Header.SetHost(m.addr)
	req.SetRequestURI(m.base.Under(path))
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if body != nil {
		req.Header.SetContentType("application/json")
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
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
