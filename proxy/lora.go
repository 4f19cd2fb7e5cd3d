package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/exposition"
	"github.com/kvrouter/kvrouter/proxy/failure"
)

// LoRAConfig is how the proxy follows the engines' LoRA adapters.
type LoRAConfig struct {
	// ModelRefresh, when positive, asks every worker's /v1/models this
	// often (the engine scrape's interval), so that adapters loaded or
	// unloaded at run time are routed within one; 0 asks a worker until it
	// first answers (and every 10 s until then).
	ModelRefresh time.Duration
	// LoadPath, when set, makes the router load an adapter no worker lists
	// onto the worker it would place it on (vLLM's POST
	// /v1/load_lora_adapter, which needs VLLM_ALLOW_RUNTIME_LORA_UPDATING),
	// as lora_path the template with AdapterNameVar replaced by the
	// adapter's name (--lora-load-path); "" (the default) never loads one,
	// and such a request is a 404.
	LoadPath string
}

var _ = exposition.Describe(map[string]string{
	"vllm_router_lora_loads_total": "LoRA adapters no worker listed that this replica loaded on a worker (--lora-load-path), by result: ok, failed.",
})

// AdapterNameVar is what LoRAConfig.LoadPath names the adapter by.
const AdapterNameVar = "{name}"

// pathLoadAdapter is vLLM's route that loads an adapter at run time.
const pathLoadAdapter = "/v1/load_lora_adapter"

// adapterLoads loads adapters on demand, one load of each at a time.
type adapterLoads struct {
	path     string
	calls    *workerCalls
	log      *slog.Logger
	mu       sync.Mutex
	inflight map[string]*adapterLoad // by name; gone once done
	ok       *metrics.Counter
	failed   *metrics.Counter
}

// adapterLoad is one load under way; the requests that need the same
// adapter meanwhile wait for it.
type adapterLoad struct {
	done chan struct{}
	err  error
}

// newAdapterLoads is nil unless cfg.LoadPath is set.
func newAdapterLoads(cfg LoRAConfig, calls *workerCalls, log *slog.Logger, set *metrics.Set) *adapterLoads {
	if cfg.LoadPath == "" {
		return nil
	}
	return &adapterLoads{path: cfg.LoadPath, calls: calls, log: log, inflight: map[string]*adapterLoad{},
		ok:     set.NewCounter(`vllm_router_lora_loads_total{result="ok"}`),
		failed: set.NewCounter(`vllm_router_lora_loads_total{result="failed"}`)}
}

// load loads adapter name on a worker of role, or waits for the load of it
// under way, and returns its error.
func (l *adapterLoads) load(ctx context.Context, router *affinity.Router, role, name string) error {
	l.mu.Lock()
	if c := l.inflight[name]; c != nil {
		l.mu.Unlock()
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	c := &adapterLoad{done: make(chan struct{})}
	l.inflight[name] = c
	l.mu.Unlock()
	c.err = l.loadOnce(ctx, router, role, name)
	l.mu.Lock()
	delete(l.inflight, name)
	l.mu.Unlock()
	close(c.done)
	return c.err
}

// loadOnce asks the worker router would place the adapter on to load it,
// among the eligible workers of role that serve adapters (all of them when
// none lists one yet), and records that it serves it.
func (l *adapterLoads) loadOnce(ctx context.Context, router *affinity.Router, role, name string) error {
	v := l.calls.fleet.view()
	pool := v.lora[role]
	if pool == nil || pool.Len() == 0 {
		pool = v.all[role]
	}
	if pool == nil || pool.Len() == 0 {
		return failure.Errorf(failure.ErrNoWorker, "no healthy %s worker to load the adapter %q on", role, name)
	}
	m := v.members[router.AdapterHome(affinity.AdapterKeyOf(name), pool)]
	body, _ := json.Marshal(map[string]string{"lora_name": name, "lora_path": strings.ReplaceAll(l.path, AdapterNameVar, name)})
	answer, status, err := l.calls.call(ctx, m.Worker, fasthttp.MethodPost, pathLoadAdapter, body)
	if err == nil && !loadedOrHeld(status, answer) {
		l.log.Warn("loading a LoRA adapter refused", "adapter", name, "worker", m.URL, "status", status,
			"answer", string(answer[:min(len(answer), maxEngineMessage)]))
		err = errors.New("the worker answered " + strconv.Itoa(status)) // its words are the operator's, in the log
	}
	if err != nil {
		l.failed.Inc()
		l.log.Debug("loading a LoRA adapter failed", "adapter", name, "worker", m.URL, "err", err)
		return failure.Errorf(failure.ErrModelNotFound, "the model %q does not exist (loading it as an adapter failed: %v)", name, err)
	}
	l.ok.Inc()
	l.log.Info("loaded a LoRA adapter", "adapter", name, "worker", m.URL)
	l.calls.fleet.addAdapter(m.ID, name)
	return nil
}

// loadedOrHeld reports whether the engine's answer to a load says it holds
// the adapter now: it loaded it, or (vLLM's 400) had already.
func loadedOrHeld(status int, answer []byte) bool {
	return status == fasthttp.StatusOK || status == fasthttp.StatusBadRequest && strings.Contains(string(answer), "already been loaded")
}

// maxEngineMessage bounds what the log keeps of an engine's refusal.
const maxEngineMessage = 256
