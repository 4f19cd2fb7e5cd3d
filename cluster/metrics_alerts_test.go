package cluster

import (
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// scrapeFamilies reads r's /metrics with Prometheus' parser: each family's
// samples by their label pairs ("worker=..." or "" for none).
func scrapeFamilies(t *testing.T, c *testCluster, r *Replica) map[string]map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(c.get(r, "/metrics").Body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for name, f := range families {
		out[name] = map[string]float64{}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[name][strings.Join(labels, ",")] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return out
}

// The gauges the alerts compare: live members against Raft voters, the
// registry loaded, and each worker's wedge and degrade verdicts (0 while
// none is held). A replica that stops leaves its peers with fewer members
// than voters, the condition of KVRouterFewerMembersThanVoters.
func TestReplicaExportsWhatTheAlertsCompare(t *testing.T) {
	metrics.ExposeMetadata(true)
	defer metrics.ExposeMetadata(false)
	c := newTestCluster(t, 2)
	c.startN(3)
	c.waitReady()
	r := c.replicas["r0"]
	m := scrapeFamilies(t, c, r)
	for family, want := range map[string]float64{"vllm_router_cluster_members": 3, "vllm_router_cluster_raft_voters": 3,
		"vllm_router_cluster_registry_loaded": 1} {
		if got, ok := m[family][""]; !ok || got != want {
			t.Errorf("%s = %v (exported: %v), want %v", family, got, ok, want)
		}
	}
	for _, family := range []string{"vllm_router_worker_wedged", "vllm_router_worker_degraded"} {
		for _, w := range c.workers {
			if got, ok := m[family]["worker="+w.url]; !ok || got != 0 {
				t.Errorf("%s{worker=%q} = %v (exported: %v), want 0", family, w.url, got, ok)
			}
		}
	}
	c.stop("r2", false)
	testwait.Eventually(t, testDeadline, func() bool {
		m := scrapeFamilies(t, c, r)
		return m["vllm_router_cluster_members"][""] == 2 && m["vllm_router_cluster_raft_voters"][""] == 3
	}, "r0 counts two live members of three voters")
}
