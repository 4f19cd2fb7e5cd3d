package cluster

import (
	"strings"
	"testing"
)

// TestAnEngineThatHeldNothingMakesTheRepeatAFalseHit: a prompt sent twice
// through one replica is predicted a hit the second time; the engine's
// answer says it found nothing cached, so /metrics counts a false hit, and
// the first sight a cold miss, not a lost hit, and the worker's index
// budget is calibrated down to 0.95. Answers that do not say what was
// cached are not judged.
func TestAnEngineThatHeldNothingMakesTheRepeatAFalseHit(t *testing.T) {
	c := newTestCluster(t, 2)
	c.startN(1)
	c.waitReady()
	r := c.replicas["r0"]
	p := prompt(evictsEverything, 4)
	first, second := c.complete(r, p), c.complete(r, p)
	if first != second {
		t.Fatalf("the repeat went to %s, not to %s which the index names", second, first)
	}
	c.complete(r, prompt("silent-about-its-cache", 4))
	scrape := c.get(r, "/metrics").Body
	for _, want := range []string{"vllm_router_judged_decisions_total 2\n", "vllm_router_predicted_hits_total 1\n",
		"vllm_router_false_hits_total 1\n", "vllm_router_engine_hits_total 0\n", "vllm_router_cold_misses_total 1\n",
		`vllm_router_false_hits_by_fact_total{fact="own"} 1` + "\n", `vllm_router_lost_hits_total{cause="shed"} 0` + "\n",
		`vllm_router_lost_hits_total{cause="peer_fact_late"} 0` + "\n", "vllm_router_judged_prompt_tokens_total 1024\n",
		`vllm_router_index_budget_scale{worker="` + c.workers[0].url + `"} `,
		"vllm_router_index_budget_scale{worker=\"" + workerURLNamed(c, first) + "\"} 0.95\n"} {
		if !strings.Contains(scrape, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// workerURLNamed is the URL of the fake worker called name.
func workerURLNamed(c *testCluster, name string) string {
	for _, w := range c.workers {
		if w.name == name {
			return w.url
		}
	}
	return ""
}
