package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/exposition"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// The Grafana dashboard of deploy/grafana queries only metrics the router
// exports: scraped from real replicas after traffic, not from a list kept
// by hand.

const dashboardPath = "../../deploy/grafana/kvrouter.json"

// grafanaDashboard is the part of a dashboard's JSON that holds queries.
type grafanaDashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promNumbers   = regexp.MustCompile(`(^|[^A-Za-z0-9_:])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?:ms|[smhdwy])?`)
	promNames     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promKeywords  = []string{"and", "or", "unless", "bool", "offset", "by", "without"}
	labelValuesOf = regexp.MustCompile(`^label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,`)
)

// queriedMetrics returns the metric names a PromQL expression selects:
// every name left once strings, label matchers, ranges, grouping labels
// and numbers are taken out, that is not called as a function.
func queriedMetrics(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	e = promNumbers.ReplaceAllString(e, "$1 ")
	var out []string
	for _, m := range promNames.FindAllStringSubmatch(e, -1) {
		name := strings.TrimSpace(m[0])
		if m[1] != "" || slices.Contains(promKeywords, name) {
			continue // a function or an aggregation, or an operator
		}
		out = append(out, name)
	}
	return out
}

func TestQueriedMetricsFindsTheSelectedNames(t *testing.T) {
	cases := map[string][]string{
		`sum by (route) (rate(vllm_router_requests_total{instance=~"$instance"}[$__rate_interval]))`: {"vllm_router_requests_total"},
		`histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y{z}"}[5m])))`:                       {"a_bucket"},
		`sum(rate(hits[1m])) / clamp_min(sum(rate(hits[1m])) + sum(rate(misses[1m])), 1e-9)`:         {"hits", "hits", "misses"},
		`min by (worker) (up) unless on (worker) down offset 5m > bool 0`:                            {"up", "down"},
	}
	for expr, want := range cases {
		if got := queriedMetrics(expr); !slices.Equal(got, want) {
			t.Errorf("queriedMetrics(%q) = %q, want %q", expr, got, want)
		}
	}
}

// dashboardQueries returns, per metric name, where the dashboard queries it.
func dashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	uses := map[string][]string{}
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			for _, name := range queriedMetrics(target.Expr) {
				uses[name] = append(uses[name], p.Title)
			}
		}
	}
	for _, v := range d.Templating.List {
		if m := labelValuesOf.FindStringSubmatch(v.Definition); m != nil {
			uses[m[1]] = append(uses[m[1]], "variable $"+v.Name)
		}
	}
	if len(uses) < 10 {
		t.Fatalf("the dashboard queries only %d metrics: %v", len(uses), uses)
	}
	return uses
}

// exportedMetrics scrapes base's /metrics and returns every series name
// it exports (a histogram's _bucket, _sum and _count included).
func exportedMetrics(t *testing.T, base string) map[string]bool {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s/metrics: %v", base, err)
	}
	out := map[string]bool{}
	for name, f := range families {
		out[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		}
	}
	return out
}

// TestTheExportedMetricsAreTheOnesDocumented scrapes two real replicas
// after traffic: the dashboard queries only what they export, and
// docs/metrics.md names every family they export.
func TestTheExportedMetricsAreTheOnesDocumented(t *testing.T) {
	exported := scrapedAfterTraffic(t)
	t.Run("the dashboard queries only exported metrics", func(t *testing.T) {
		uses := dashboardQueries(t)
		for name, panels := range uses {
			if !exported[name] {
				t.Errorf("the dashboard queries %s (in %q), which no replica exports", name, panels)
			}
		}
		t.Logf("%d metrics queried, all among the %d exported", len(uses), len(exported))
	})
	t.Run("docs/metrics.md names every exported family", func(t *testing.T) {
		doc, err := os.ReadFile("../../docs/metrics.md")
		if err != nil {
			t.Fatal(err)
		}
		documented := documentedMetrics(string(doc))
		for name := range exported {
			if !documented[name] && !documented[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] {
				t.Errorf("docs/metrics.md does not name %s", name)
			}
		}
	})
}

// TestEveryDescribedFamilyIsDocumented holds docs/metrics.md to every
// family the binary's packages describe, exported in this run or not
// (the KV-event and LoRA families need their features on).
func TestEveryDescribedFamilyIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedMetrics(string(doc))
	described := exposition.Described()
	for _, family := range described {
		if !documented[family] {
			t.Errorf("docs/metrics.md does not name %s", family)
		}
	}
	t.Logf("%d described families", len(described))
}

// documentedMetrics are the metric names (vllm_router_*, and the Go
// runtime's go_*) docs/metrics.md writes in backquotes, labels left off.
func documentedMetrics(doc string) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("`((?:vllm_router|go)_[a-z0-9_]+)").FindAllStringSubmatch(doc, -1) {
		out[m[1]] = true
	}
	return out
}

// scrapedAfterTraffic is every series two replicas export after
// traffic, streamed and not, and a client error.
func scrapedAfterTraffic(t *testing.T) map[string]bool {
	routerBin, workersim := binaries(t)
	var urls []string
	for i := range 2 {
		_, u := startWorkersim(t, workersim, fmt.Sprint("w", i))
		urls = append(urls, u)
	}
	routers := startReplicaSet(t, routerBin, 2, urls)
	for i, r := range routers {
		testwait.Eventually(t, 20*time.Second, func() bool { return metric(t, r, "vllm_router_active_workers") == 2 }, "workers eligible on %s", r)
		for j := range 3 {
			complete(t, r, fmt.Sprintf("replica %d says hello %d times", i, j), j%2 == 0)
		}
		if c := complete(t, r, "", false); c.status != http.StatusBadRequest && c.status/100 != 2 {
			t.Logf("an empty prompt: %d", c.status)
		}
		resp, err := http.Post(r+"/v1/completions", "application/json", strings.NewReader(`{"model":"nobody-serves-this","prompt":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	exported := map[string]bool{}
	for _, r := range routers {
		testwait.Eventually(t, 20*time.Second, func() bool {
			return exportedMetrics(t, r)["vllm_router_cluster_gossip_report_age_seconds"]
		}, "a peer's report on %s", r)
		for name := range exportedMetrics(t, r) {
			exported[name] = true
		}
	}
	return exported
}

// The Prometheus configs are YAML with the scrape jobs the README names:
// the static job in prometheus.yml (it loads on any build, see
// TestThePrometheusConfigLoadsOnDebiansPrometheus), pod discovery in
// prometheus-k8s.yml; both evaluate rules.yml.
func TestThePrometheusConfigScrapesTheReplicas(t *testing.T) {
	for file, job := range map[string]string{"prometheus.yml": "kvrouter", "prometheus-k8s.yml": "kvrouter-k8s"} {
		raw, err := os.ReadFile("../../deploy/prometheus/" + file)
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			RuleFiles     []string `json:"rule_files"`
			ScrapeConfigs []struct {
				JobName     string `json:"job_name"`
				MetricsPath string `json:"metrics_path"`
			} `json:"scrape_configs"`
		}
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var jobs []string
		for _, s := range cfg.ScrapeConfigs {
			if s.MetricsPath != "/metrics" {
				t.Errorf("%s: job %s scrapes %q, the router serves /metrics", file, s.JobName, s.MetricsPath)
			}
			jobs = append(jobs, s.JobName)
		}
		if !slices.Equal(jobs, []string{job}) || !slices.Equal(cfg.RuleFiles, []string{"rules.yml"}) {
			t.Errorf("%s: jobs %v and rule files %v, want [%s] and [rules.yml]", file, jobs, cfg.RuleFiles, job)
		}
	}
}
