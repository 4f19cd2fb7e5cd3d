package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/exposition"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// The metrics as Prometheus itself reads them: help text on every family
// (promtool's lint finds nothing), the shipped config and rules loaded by
// a real Prometheus on loopback that scrapes two real replicas under
// traffic, every dashboard query and rule expression evaluated through
// its HTTP API, and an alert firing for a faulted worker.

const rulesPath = "../../deploy/prometheus/rules.yml"

// toolPath finds a Prometheus binary, or skips the test saying how to get it.
func toolPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("no %s on PATH: this test needs Prometheus' binaries (Debian: apt-get install prometheus; .ci/run installs it)", name)
	}
	return p
}

// familyName finds the metric families named in the router's source.
var familyName = regexp.MustCompile(`\bvllm_router_[a-z0-9_]*[a-z0-9]\b`)

// Every family the router's code names has a help text, whether or not a
// test's traffic makes it appear: a new family fails here until it is
// described next to its registration.
func TestEveryFamilyTheRouterNamesIsDescribed(t *testing.T) {
	named := map[string]string{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, name := range familyName.FindAllString(string(src), -1) {
			named[name] = path
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(named) < 40 {
		t.Fatalf("only %d families named in the source: %v", len(named), named)
	}
	for name, path := range named {
		if _, ok := exposition.Help(name); !ok {
			t.Errorf("%s (named in %s) has no help text: describe it in the metrics_help.go of its package", name, path)
		}
	}
}

// scrapeWithTraffic starts two workersims and two replicas as one cluster,
// sends each replica streamed and unstreamed completions and a client
// error, and returns the replicas once both hear the other's load reports.
func scrapeWithTraffic(t *testing.T, workers int, extra ...string) (routers, urls []string) {
	t.Helper()
	routerBin, workersim := binaries(t)
	for i := range workers {
		_, u := startWorkersim(t, workersim, fmt.Sprint("w", i))
		urls = append(urls, u)
	}
	routers = startReplicaSet(t, routerBin, 2, urls, extra...)
	for i, r := range routers {
		testwait.Eventually(t, 20*time.Second, func() bool { return metric(t, r, "vllm_router_active_workers") == float64(workers) }, "workers eligible on %s", r)
		for j := range 4 {
			complete(t, r, fmt.Sprintf("replica %d asks question %d", i, j), j%2 == 0)
		}
		resp, err := http.Post(r+"/v1/completions", "application/json", strings.NewReader(`{"model":`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		testwait.Eventually(t, 20*time.Second, func() bool {
			return exportedMetrics(t, r)["vllm_router_cluster_gossip_report_age_seconds"]
		}, "a peer's report on %s", r)
	}
	return routers, urls
}

func scrape(t *testing.T, base string) []byte {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A live replica's /metrics, read by Prometheus' parser, has help text on
// every family; promtool's lint (help, units, counter names) finds nothing.
func TestPromtoolFindsNothingInALiveReplicasMetrics(t *testing.T) {
	routers, _ := scrapeWithTraffic(t, 2)
	pages := map[string][]byte{}
	for _, r := range routers {
		pages[r] = scrape(t, r)
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(bytes.NewReader(pages[r]))
		if err != nil {
			t.Fatalf("%s/metrics: %v", r, err)
		}
		if len(families) < 40 {
			t.Errorf("%s exports only %d families", r, len(families))
		}
		for name, f := range families {
			if f.GetHelp() == "" {
				t.Errorf("%s: %s has no help text", r, name)
			}
		}
	}
	promtool := toolPath(t, "promtool")
	for r, page := range pages {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(page)
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics on %s/metrics: %v\n%s", r, err, out)
		}
	}
}

func TestThePrometheusConfigLoadsOnDebiansPrometheus(t *testing.T) {
	promtool := toolPath(t, "promtool")
	for _, args := range [][]string{
		{"check", "config", "../../deploy/prometheus/prometheus.yml"},
		{"check", "rules", rulesPath},
		{"test", "rules", "../../deploy/prometheus/rules_test.yml"},
	} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// rule is one rule of rules.yml.
type rule struct {
	Record string `json:"record"`
	Alert  string `json:"alert"`
	Expr   string `json:"expr"`
	For    string `json:"for"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	raw, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range file.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) < 20 {
		t.Fatalf("only %d rules in %s", len(out), rulesPath)
	}
	return out
}

// withBool turns each comparison at the top of a PromQL expression (outside
// label matchers and strings) into its bool form, so that an alert's
// condition returns 0 or 1 for every series it judges instead of only the
// series that fire: evaluated that way, an alert "returns data" when what
// it watches exists.
func withBool(expr string) string {
	var b strings.Builder
	depth, quoted := 0, false
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case quoted && c == '\\':
			b.WriteByte(c)
			i++
		case quoted:
			quoted = c != '"'
		case c == '"':
			quoted = true
		case c == '{':
			depth++
		case c == '}':
			depth--
		case depth == 0 && strings.IndexByte("<>=!", c) >= 0:
			op := string(c)
			if i+1 < len(expr) && expr[i+1] == '=' {
				op += "="
			}
			if op != "=" && op != "!" && !strings.HasPrefix(strings.TrimSpace(expr[i+len(op):]), "bool") {
				b.WriteString(op + " bool")
				i += len(op) - 1
				continue
			}
		}
		if i < len(expr) {
			b.WriteByte(expr[i])
		}
	}
	return b.String()
}

func TestWithBoolKeepsMatchersAndStrings(t *testing.T) {
	for in, want := range map[string]string{
		`up{job=~"kvrouter.*"} == 0`:                                `up{job=~"kvrouter.*"} == bool 0`,
		`a{x!="y"} < 0.7 * b and b > 0.2`:                           `a{x!="y"} < bool 0.7 * b and b > bool 0.2`,
		`max by (w) (c{l="a>b"}) >= 1`:                              `max by (w) (c{l="a>b"}) >= bool 1`,
		`x != bool 1`:                                               `x != bool 1`,
		`sum(rate(e{t=~"a|b",s="\"q\""}[5m])) / clamp_min(r, 1e-9)`: `sum(rate(e{t=~"a|b",s="\"q\""}[5m])) / clamp_min(r, 1e-9)`,
	} {
		if got := withBool(in); got != want {
			t.Errorf("withBool(%q) = %q, want %q", in, got, want)
		}
	}
}

// prometheus is a Prometheus process of the test's own on loopback.
type prometheus struct{ base string }

// startPrometheus runs Debian's Prometheus with a config of the test's own:
// targets scraped every second by the job name the rules expect, the
// shipped rules evaluated every second, its data in a temporary directory.
func startPrometheus(t *testing.T, targets []string) prometheus {
	t.Helper()
	bin := toolPath(t, "prometheus")
	rules, err := filepath.Abs(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	quoted, _ := json.Marshal(targets)
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [%q]\n"+
		"scrape_configs:\n  - job_name: kvrouter\n    static_configs: [{targets: %s}]\n", rules, quoted)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	start(t, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	p := prometheus{base: "http://" + addr}
	testwait.Eventually(t, time.Minute, func() bool {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "Prometheus ready on %s", addr)
	return p
}

// query evaluates expr now: its samples' values, or the API's error.
func (p prometheus) query(expr string) ([]float64, error) {
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var reply struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		return nil, err
	}
	if reply.Status != "success" {
		return nil, fmt.Errorf("%s", reply.Error)
	}
	var out []float64
	for _, r := range reply.Data.Result {
		s, _ := r.Value[1].(string)
		v, _ := strconv.ParseFloat(s, 64)
		out = append(out, v)
	}
	return out, nil
}

// hasData reports whether expr returns at least one sample that is a number.
func (p prometheus) hasData(expr string) (bool, error) {
	values, err := p.query(expr)
	return slices.ContainsFunc(values, func(v float64) bool { return !math.IsNaN(v) }), err
}

// firing returns the labels of the firing alerts named name.
func (p prometheus) firing(t *testing.T, name string) []map[string]string {
	return p.alerts(t, name, "firing")
}

// alerts returns the labels of the alerts named name in one of states
// (pending: the condition holds, for: has not passed yet; firing).
func (p prometheus) alerts(t *testing.T, name string, states ...string) []map[string]string {
	resp, err := http.Get(p.base + "/api/v1/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reply struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, a := range reply.Data.Alerts {
		if a.Labels["alertname"] == name && slices.Contains(states, a.State) {
			out = append(out, a.Labels)
		}
	}
	return out
}

// dashboardExprs returns the dashboard's queries as Grafana would send
// them for every replica.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	grafana := strings.NewReplacer("$instance", ".*", "$__rate_interval", "20s")
	var out []string
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			out = append(out, grafana.Replace(target.Expr))
		}
	}
	return out
}

// Prometheus scrapes two replicas under traffic and evaluates the shipped
// rules: every dashboard query, every recorded series and every alert's
// condition (in bool form) parses and returns data; then a worker wedged
// under traffic makes KVRouterWorkerWedged fire within its for: and some
// slack for scrapes and evaluations.
func TestPrometheusEvaluatesTheDashboardAndTheRules(t *testing.T) {
	toolPath(t, "prometheus")
	routers, urls := scrapeWithTraffic(t, 3, "--wedge-timeout", "2s")
	var targets []string
	for _, r := range routers {
		targets = append(targets, strings.TrimPrefix(r, "http://"))
		keepBusy(t, r, 4, 0)
	}
	prom := startPrometheus(t, targets)
	rules := readRules(t)
	checks := map[string]string{} // what -> expression that must return data
	for _, e := range dashboardExprs(t) {
		checks["dashboard query "+e] = e
	}
	var wedged rule
	for _, r := range rules {
		switch {
		case r.Record != "":
			checks["recorded series "+r.Record] = r.Record
		case r.Alert != "":
			if _, err := prom.query(r.Expr); err != nil {
				t.Errorf("alert %s does not parse: %v", r.Alert, err)
			}
			checks["the condition of alert "+r.Alert] = withBool(r.Expr)
		}
		if r.Alert == "KVRouterWorkerWedged" {
			wedged = r
		}
	}
	missing := map[string]error{}
	if !testwait.Holds(2*time.Minute, func() bool {
		clear(missing)
		for what, expr := range checks {
			if ok, err := prom.hasData(expr); !ok {
				missing[what] = err
			}
		}
		return len(missing) == 0
	}) {
		for what, err := range missing {
			t.Errorf("%s: no data after 2 minutes of traffic (%v)", what, err)
		}
		t.FailNow()
	}
	t.Logf("%d dashboard queries and rules return data", len(checks))

	// No condition holds on a healthy tier, not even for a moment (pending).
	// The hit rate's is left out: its 1-hour baseline is a minute old here,
	// and a hit rate still climbing as the caches warm may dip below it.
	for _, r := range rules {
		if r.Alert != "" && r.Alert != "KVRouterHitRateCollapsed" {
			if active := prom.alerts(t, r.Alert, "pending", "firing"); len(active) > 0 {
				t.Errorf("%s holds on a healthy tier: %v", r.Alert, active)
			}
		}
	}
	faulted := urls[2]
	resp, err := http.Post(faulted+"/admin/fault", "application/json", strings.NewReader(`{"mode":"wedge"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hold, err := model.ParseDuration(wedged.For)
	if err != nil {
		t.Fatalf("KVRouterWorkerWedged's for: %q: %v", wedged.For, err)
	}
	start := time.Now()
	testwait.Eventually(t, time.Duration(hold)+90*time.Second, func() bool {
		return slices.ContainsFunc(prom.firing(t, "KVRouterWorkerWedged"), func(l map[string]string) bool {
			return l["worker"] == faulted
		})
	}, "KVRouterWorkerWedged firing for %s", faulted)
	t.Logf("KVRouterWorkerWedged fired %v after the fault (for: %s)", time.Since(start).Round(time.Second), wedged.For)
}
