package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
)

// discoverInterval is how often workers whose models or KV capacity are not
// known yet are asked again.
const discoverInterval = 10 * time.Second

// discovery learns what the registry does not say about a worker: the models
// it serves (its /v1/models, when the registry declares none, or at every
// round when models are refreshed: LoRAConfig.ModelRefresh) and its KV
// cache capacity (vLLM's vllm:cache_config_info on /metrics), which becomes
// its budget in the ownership index, so the index forgets about when the
// engine does. A worker that does not answer is asked again next round.
type discovery struct {
	fleet     *Fleet
	calls     *workerCalls
	index     *affinity.Index // nil: no budgets to set
	blockSize int
	every     time.Duration
	log       *slog.Logger
}

// newDiscovery asks the workers of fleet through calls every modelRefresh
// (LoRAConfig.ModelRefresh; discoverInterval when not positive), and sets
// their budgets in index in blocks of blockSize bytes (Config.BlockSize).
func newDiscovery(blockSize int, modelRefresh time.Duration, fleet *Fleet, calls *workerCalls, index *affinity.Index, log *slog.Logger) *discovery {
	every := discoverInterval
	if modelRefresh > 0 {
		every = modelRefresh
	}
	return &discovery{fleet: fleet, calls: calls, index: index, blockSize: blockSize, every: every, log: log}
}

// run asks the workers in rounds until ctx ends.
func (d *discovery) run(ctx context.Context) {
	t := time.NewTicker(d.every)
	defer t.Stop()
	for {
		for _, w := range d.fleet.undiscovered() {
			if models, err := d.calls.listModels(ctx, w); err == nil {
				d.fleet.setDiscovered(w.ID, models)
			}
		}
		for _, w := range d.fleet.unmeasured() {
			if tokens, err := d.kvCapacity(ctx, w); err == nil {
				d.fleet.setMeasured(w.ID)
				d.setBudget(w, tokens)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.fleet.changed():
		}
	}
}

// bytesPerToken converts the engine's capacity in tokens to bytes of routing
// text, the index's unit (about 4 bytes a token).
const bytesPerToken = 4

func (d *discovery) setBudget(w Worker, tokens int64) {
	if d.index == nil || d.blockSize <= 0 || tokens <= 0 {
		return
	}
	blocks := tokens * bytesPerToken / int64(d.blockSize)
	d.index.SetBudget(w.ID, int(max(blocks, 1)))
	d.log.Debug("worker KV capacity", "worker", w.URL, "tokens", tokens, "index_blocks", blocks)
}

var cacheConfigInfo = regexp.MustCompile(`(?m)^vllm:cache_config_info\{([^}]*)\}`)
var labelValue = regexp.MustCompile(`(\w+)="([^"]*)"`)

// kvCapacity reads a worker's KV capacity in tokens from its metrics:
// num_gpu_blocks x block_size of vllm:cache_config_info.
func (d *discovery) kvCapacity(ctx context.Context, w Worker) (int64, error) {
	body, err := d.calls.get(ctx, w, "/metrics")
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
