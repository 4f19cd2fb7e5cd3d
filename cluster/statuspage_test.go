package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/admin/admintest"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/store"
)

// The status page is a shell whose data comes from the admin endpoints: it
// must not be a way around their rules.
func TestStatusPageKeepsTheAdminRules(t *testing.T) {
	fsm := store.NewFSM()
	open := admin.New(admin.Config{Registry: fsm.View, Apply: admintest.DirectApply(fsm)})
	locked := admin.New(admin.Config{Token: "s3cret", Registry: fsm.View, Apply: admintest.DirectApply(fsm)})
	cases := []struct {
		name        string
		admin       *admin.Admin
		method, uri string
		host, token string
		want        int
	}{
		{"no token: the page on a loopback Host", open, "GET", "/ui", "127.0.0.1:30000", "", http.StatusOK},
		{"no token: its script", open, "GET", "/ui/app.js", "localhost:30000", "", http.StatusOK},
		{"no token: a rebinding page's Host", open, "GET", "/ui/", "evil.example", "", http.StatusForbidden},
		{"no token: the data under a rebinding Host", open, "GET", "/cluster/workers", "evil.example", "", http.StatusForbidden},
		{"no token: a write to the page", open, "POST", "/ui", "127.0.0.1", "", http.StatusMethodNotAllowed},
		{"no token: an unknown file", open, "GET", "/ui/secrets.txt", "127.0.0.1", "", http.StatusNotFound},
		{"token: the shell to anyone", locked, "GET", "/ui", "router.example", "", http.StatusOK},
		{"token: the data not without it", locked, "GET", "/cluster/workers", "router.example", "", http.StatusUnauthorized},
		{"token: the status not without it", locked, "GET", "/cluster/status", "router.example", "", http.StatusUnauthorized},
		{"token: the data with it", locked, "GET", "/cluster/workers", "router.example", "s3cret", http.StatusOK},
		{"token: the history not without it", locked, "GET", "/cluster/history", "router.example", "", http.StatusUnauthorized},
		{"no token: the history under a rebinding Host", open, "GET", "/cluster/history", "evil.example", "", http.StatusForbidden},
		{"token: no write through the page", locked, "POST", "/ui", "router.example", "s3cret", http.StatusMethodNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := admintest.Request(tc.admin, tc.method, tc.uri, tc.host, "", tc.token, ""); got != tc.want {
				t.Fatalf("%s %s: status %d, want %d", tc.method, tc.uri, got, tc.want)
			}
		})
	}
}

func TestStatusPageForbidsFramingAndForeignScripts(t *testing.T) {
	c := admintest.Serve(t, admin.New(admin.Config{Registry: store.NewFSM().View, Apply: admintest.DirectApply(store.NewFSM())}))
	r := c.Do(http.MethodGet, "/ui/", "")
	admintest.ExpectStatus(t, r, http.StatusOK)
	if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") ||
		!strings.Contains(csp, "script-src 'self'") || r.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("headers %v: want framing refused and scripts from this origin only", r.Header)
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") || !strings.Contains(r.Body, `src="/ui/app.js"`) {
		t.Fatalf("index: %s %q", r.Header.Get("Content-Type"), r.Body)
	}
	for _, f := range []string{"/ui/app.js", "/ui/style.css"} {
		if r := c.Do(http.MethodGet, f, ""); r.Status != http.StatusOK || len(r.Body) < 100 {
			t.Fatalf("%s: %d, %d bytes", f, r.Status, len(r.Body))
		}
	}
}

// /cluster/workers counts, per worker, what the page turns into rates: hits
// and misses of the decisions this replica made, and tokens of the answers.
func TestClusterWorkersCountsOutcomesAndTokensPerWorker(t *testing.T) {
	c := newTestCluster(t, 2)
	c.startN(1)
	c.waitReady()
	r := c.anyLive("")
	p := prompt("stats", 4)
	first := c.complete(r, p)
	for range 3 {
		if got := c.complete(r, p); got != first {
			t.Fatalf("the same prompt went to %s, then %s", first, got)
		}
	}
	var stats adminapi.WorkerStats
	reply := c.get(r, "/cluster/workers")
	admintest.ExpectStatus(t, reply, http.StatusOK)
	if err := json.Unmarshal([]byte(reply.Body), &stats); err != nil {
		t.Fatal(err)
	}
	if stats.Node != r.cfg.NodeName || len(stats.Workers) != 2 || stats.At <= 0 {
		t.Fatalf("answer %+v", stats)
	}
	owner := c.workerID(r, first)
	var got []string
	for _, w := range stats.Workers {
		got = append(got, fmt.Sprintf("%d: hits %d misses %d tokens %d processed %d circuit %s probed %v",
			w.ID, w.Hits, w.Misses, w.Tokens, w.Processed, w.Circuit, w.Probed))
		want := adminapi.WorkerStat{Circuit: "closed"}
		if uint32(w.ID) == uint32(owner) {
			want.Hits, want.Misses, want.Tokens, want.Processed = 3, 1, 4, 4
		}
		if w.Hits != want.Hits || w.Misses != want.Misses || w.Tokens != want.Tokens || w.Processed != want.Processed ||
			w.Circuit != want.Circuit || !w.Probed || !w.Healthy || w.PeerLoads == nil {
			t.Errorf("worker %d: %+v, want hits %d misses %d tokens %d processed %d, closed, probed, healthy",
				w.ID, w, want.Hits, want.Misses, want.Tokens, want.Processed)
		}
	}
	t.Logf("%s", strings.Join(got, "\n"))
}

// A strict scraper (Prometheus' own text parser) reads a replica's
// /metrics: each family typed once and its samples together, the
// per-worker and per-peer families included.
func TestMetricsParseWithTwoPeersAndTwoWorkers(t *testing.T) {
	metrics.ExposeMetadata(true)
	defer metrics.ExposeMetadata(false)
	c := newTestCluster(t, 2)
	c.startN(3)
	c.waitReady()
	r := c.replicas["r0"]
	testwait.Eventually(t, testDeadline, func() bool { return len(r.sync.Origins(time.Now())) == 2 }, "reports from both peers")
	reply := c.get(r, "/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(reply.Body))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	for name, want := range map[string]int{"vllm_router_cb_state_transitions_total": 6,
		"vllm_router_cluster_gossip_lag_seconds": 2, "vllm_router_cluster_gossip_report_age_seconds": 2} {
		if got := len(families[name].GetMetric()); got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
}
