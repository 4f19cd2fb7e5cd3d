package sim

import (
	"slices"

	"github.com/zeebo/xxh3"
)

// LoRA adapters, as vLLM v1 runs them. An engine holds at most MaxLoras
// adapters in its GPU slots, and one batch runs at most that many: a
// waiting request whose adapter is none of the running requests' is
// skipped while MaxLoras adapters run (vLLM's scheduler skips it and looks
// at the next), and admitting one whose adapter is not in a slot swaps the
// least recently run adapter no running request holds out for it, which
// costs LoraSwapMs in that step (the adapter's weights copied in). Blocks
// computed under an adapter are cached under it (vLLM keys them by its
// name), so the same text under another adapter or the base model shares
// nothing.

// loraSlots is the engine's adapters: those in its GPU slots, the step
// each last ran in, the running and waiting requests' adapters, and the
// loads so far.
type loraSlots struct {
	resident map[string]uint64 // adapter -> the step it last ran in
	step     uint64
	running  map[string]int // adapter -> running requests
	waiting  map[string]int // adapter -> live waiting requests
	loads    uint64
}

func newLoRASlots() loraSlots {
	return loraSlots{resident: map[string]uint64{}, running: map[string]int{}, waiting: map[string]int{}}
}

// allows reports whether a waiting request of adapter may join the batch:
// a base-model request always may; one of an adapter while fewer than max
// adapters run, or when its adapter runs already.
func (l *loraSlots) allows(adapter string, max int) bool {
	return adapter == "" || max <= 0 || l.running[adapter] > 0 || len(l.running) < max
}

// activate makes adapter resident for a request admitted now, loading it
// into a slot when it is not (evicting the adapter least recently run that
// no running request holds, when max are resident), and reports whether it
// loaded.
func (l *loraSlots) activate(adapter string, max int) bool {
	if adapter == "" {
		return false
	}
	_, held := l.resident[adapter]
	l.resident[adapter] = l.step
	if held {
		return false
	}
	if max > 0 && len(l.resident) > max {
		l.evictIdlest(adapter)
	}
	l.loads++
	return true
}

// evictIdlest removes the resident adapter, other than keep, least
// recently run that no running request holds.
func (l *loraSlots) evictIdlest(keep string) {
	victim, oldest := "", uint64(0)
	for a, step := range l.resident {
		if a != keep && l.running[a] == 0 && (victim == "" || step < oldest || step == oldest && a < victim) {
			victim, oldest = a, step
		}
	}
	if victim != "" {
		delete(l.resident, victim)
	}
}

// start counts an admitted request of adapter as running, loading the adapter into a slot
// (evicting as activate does) when it is not in one; it reports whether it loaded, which costs
// LoraSwapMs in the step being composed.
func (l *loraSlots) start(adapter string, max int) bool {
	countAdapter(l.waiting, adapter, -1)
	countAdapter(l.running, adapter, 1)
	return l.activate(adapter, max)
}

// ran marks the running requests' adapters as run in the step that starts.
func (l *loraSlots) ran() {
	l.step++
	for a := range l.running {
		l.resident[a] = l.step
	}
}

// countAdapter moves n requests of adapter into (n > 0) or out of (n < 0) m.
func countAdapter(m map[string]int, adapter string, n int) {
	if adapter == "" {
		return
	}
	if m[adapter] += n; m[adapter] <= 0 {
		delete(m, adapter)
	}
}

// names is m's adapters, sorted.
func names(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// RunningAdapters are the adapters of the running requests, sorted (vLLM's
// running_lora_adapters).
func (e *Engine) RunningAdapters() []string { return names(e.lora.running) }

// WaitingAdapters are the adapters of the waiting requests, sorted (vLLM's
// waiting_lora_adapters).
func (e *Engine) WaitingAdapters() []string { return names(e.lora.waiting) }

// LoraLoads is how many times an adapter was loaded into a slot so far
// (monotonic).
func (e *Engine) LoraLoads() uint64 { return e.lora.loads }

// identitySeed is h[-1] of a prompt's chain under adapter and salt:
// chainSeed for the base model unsalted, else a seed of its own, so that
// no block of the prompt is shared across identities (vLLM puts the
// adapter's name in every block's extra keys and the salt in the first's,
// and the chain carries both on).
func identitySeed(adapter, salt string) uint64 {
	if adapter == "" && salt == "" {
		return chainSeed
	}
	return xxh3.HashStringSeed("lora\x00"+adapter+"\x00cache_salt\x00"+salt, chainSeed)
}
