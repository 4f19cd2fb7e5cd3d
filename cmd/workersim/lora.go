package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// LoRA adapters as vLLM serves them: --lora-modules at start, POST /v1/load_lora_adapter and
// /v1/unload_lora_adapter at run time (vLLM's, with VLLM_ALLOW_RUNTIME_LORA_UPDATING), each
// listed by /v1/models with the first --model as its parent, and vllm:lora_requests_info on
// /metrics. The engine runs them (sim/lora.go): --max-loras in its slots and in one batch, each
// load costing its step --lora-swap-ms.

// The paths of runtime adapter updates.
const (
	pathLoadAdapter   = "/v1/load_lora_adapter"
	pathUnloadAdapter = "/v1/unload_lora_adapter"
)

// defaultLoRASwapMs is --lora-swap-ms's default: an adapter of rank 16 on an 8B model is some
// 40-160 MB, copied in over PCIe in a few milliseconds, and the engine's bookkeeping around a
// swap takes longer; loads from disk (an adapter not in the CPU cache) take far longer.
const defaultLoRASwapMs = 20

// maxAdapters bounds the adapters one worker serves: a stranger's loads cannot grow it without end.
const maxAdapters = 4096

// loraModule is one adapter: its name, which requests name as their model, and where its weights
// are (reported as its root).
type loraModule struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// loraModulesFlag collects --lora-modules, one adapter per occurrence: a slice flag would cut
// vLLM's JSON at its commas.
type loraModulesFlag struct{ specs []string }

func (f *loraModulesFlag) Set(s string) error {
	f.specs = append(f.specs, s)
	return nil
}

func (f *loraModulesFlag) String() string {
	if f == nil {
		return ""
	}
	return strings.Join(f.specs, " ")
}

// parseLoRAModules reads --lora-modules: each either vLLM's JSON ({"name": ..., "path": ...}) or
// its older name=path.
func parseLoRAModules(specs []string) ([]loraModule, error) {
	var out []loraModule
	for _, spec := range specs {
		var m loraModule
		if strings.HasPrefix(strings.TrimSpace(spec), "{") {
			if err := json.Unmarshal([]byte(spec), &m); err != nil {
				return nil, fmt.Errorf("%q: %w", spec, err)
			}
		} else {
			m.Name, m.Path, _ = strings.Cut(spec, "=")
		}
		if m.Name == "" || m.Path == "" {
			return nil, fmt.Errorf("%q: want a name and a path", spec)
		}
		out = append(out, m)
	}
	return out, nil
}

// adapterSet is the adapters the worker serves now. Safe for concurrent use.
type adapterSet struct {
	mu      sync.RWMutex
	modules []loraModule // in the order they were loaded
}

var (
	errAdapterLoaded  = errors.New("adapter already loaded")
	errAdapterMissing = errors.New("adapter not found")
)

func newAdapterSet(modules []loraModule) *adapterSet {
	return &adapterSet{modules: slices.Clone(modules)}
}

// has reports whether name is an adapter the worker serves; a nil set serves none.
func (a *adapterSet) has(name string) bool {
	if a == nil {
		return false
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	return slices.ContainsFunc(a.modules, func(m loraModule) bool { return m.Name == name })
}

// list is the adapters served now.
func (a *adapterSet) list() []loraModule {
	if a == nil {
		return nil
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	return slices.Clone(a.modules)
}

func (a *adapterSet) load(m loraModule) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case slices.ContainsFunc(a.modules, func(o loraModule) bool { return o.Name == m.Name }):
		return fmt.Errorf("%w: The lora adapter '%s' has already been loaded.", errBadRequest, m.Name)
	case len(a.modules) >= maxAdapters:
		return fmt.Errorf("%w: at most %d adapters are served", errBadRequest, maxAdapters)
	}
	a.modules = append(a.modules, m)
	return nil
}

func (a *adapterSet) unload(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := slices.IndexFunc(a.modules, func(m loraModule) bool { return m.Name == name })
	if i < 0 {
		return fmt.Errorf("%w: The lora adapter '%s' cannot be found.", errModelNotFound, name)
	}
	a.modules = slices.Delete(a.modules, i, i+1)
	return nil
}

// adapterOf is the adapter a request of model runs with: model itself when it is one, "" for a
// base model.
func (m *modelCatalog) adapterOf(model string) string {
	if m.adapters.has(model) {
		return model
	}
	return ""
}

// handleLoadAdapter serves POST /v1/load_lora_adapter: {"lora_name", "lora_path"}.
func (m *modelCatalog) handleLoadAdapter(ctx *fasthttp.RequestCtx) {
	var req struct {
		Name string `json:"lora_name"`
		Path string `json:"lora_path"`
	}
	err := json.Unmarshal(ctx.PostBody(), &req)
	switch {
	case err != nil:
		err = fmt.Errorf("%w: malformed JSON: %w", errBadRequest, err)
	case req.Name == "" || req.Path == "":
		err = fmt.Errorf("%w: Both 'lora_name' and 'lora_path' must be provided.", errBadRequest)
	default:
		err = m.adapters.load(loraModule{Name: req.Name, Path: req.Path})
	}
	m.adapterAnswer(ctx, err, "Success: LoRA adapter '"+req.Name+"' added successfully.")
}

// handleUnloadAdapter serves POST /v1/unload_lora_adapter: {"lora_name"}.
func (m *modelCatalog) handleUnloadAdapter(ctx *fasthttp.RequestCtx) {
	var req struct {
		Name string `json:"lora_name"`
	}
	err := json.Unmarshal(ctx.PostBody(), &req)
	switch {
	case err != nil:
		err = fmt.Errorf("%w: malformed JSON: %w", errBadRequest, err)
	case req.Name == "":
		err = fmt.Errorf("%w: 'lora_name' must be provided.", errBadRequest)
	default:
		err = m.adapters.unload(req.Name)
	}
	m.adapterAnswer(ctx, err, "Success: LoRA adapter '"+req.Name+"' removed successfully.")
}

// adapterAnswer answers an adapter update as vLLM does: its plain text on success.
func (m *modelCatalog) adapterAnswer(ctx *fasthttp.RequestCtx, err error, ok string) {
	if err != nil {
		m.reply.writeError(ctx, err)
		return
	}
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(ok)
}

// registerLoRAMetrics writes vllm:lora_requests_info as vLLM does (the adapters running and
// waiting, max_lora; the value the time it was read), one series, and the loads so far.
func (m *workerMetrics) registerLoRAMetrics(maxLoras int, st *engineStats, now func() float64) {
	m.set.RegisterMetricsWriter(func(w io.Writer) {
		running, waiting := st.adapters()
		metrics.WriteGaugeFloat64(w, fmt.Sprintf(`vllm:lora_requests_info{max_lora="%d",running_lora_adapters="%s",waiting_lora_adapters="%s"}`,
			maxLoras, labelEscaper.Replace(strings.Join(running, ",")), labelEscaper.Replace(strings.Join(waiting, ","))), now())
	})
	m.set.NewGauge("workersim_lora_loads_total", func() float64 { return float64(st.loraLoads.Load()) })
}
