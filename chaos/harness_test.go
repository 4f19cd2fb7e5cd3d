//go:build chaos

package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// replicas are the routers' published ports on loopback.
var replicas = map[string]string{
	"r1": "http://127.0.0.1:18081",
	"r2": "http://127.0.0.1:18082",
	"r3": "http://127.0.0.1:18083",
}

// workers are the workersims' published ports, for their fault API.
var workers = map[string]string{
	"w1": "http://127.0.0.1:19001", "w2": "http://127.0.0.1:19002",
	"w3": "http://127.0.0.1:19003", "w4": "http://127.0.0.1:19004",
}

var replicaNames = []string{"r1", "r2", "r3"}

// adminToken is the compose cluster's --admin-token.
const adminToken = "chaos-admin-token"

// project is the compose project scripts/chaos.sh starts.
const project = "kvrouter-chaos"

var client = &http.Client{Timeout: 30 * time.Second, Transport: bearer{&http.Transport{MaxIdleConnsPerHost: 64}}}

// bearer adds the admin token to every request.
type bearer struct{ next http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+adminToken)
	return b.next.RoundTrip(r)
}

// compose runs the Compose that scripts/chaos.sh found (docker compose or
// docker-compose) on the chaos project.
func compose(t *testing.T, args ...string) string {
	t.Helper()
	cmd := strings.Fields(os.Getenv("CHAOS_COMPOSE"))
	if len(cmd) == 0 {
		cmd = []string{"docker-compose"}
	}
	cmd = append(cmd, append([]string{"-f", "../docker-compose.yml", "-p", project}, args...)...)
	out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// containerID is the id of service's container.
func containerID(t *testing.T, service string) string { return compose(t, "ps", "-q", service) }

func inspect(t *testing.T, service, format string) string {
	return docker(t, "inspect", "-f", format, containerID(t, service))
}

// networkOf is the compose network's name and service's address on it.
func networkOf(t *testing.T, service string) (network, ip string) {
	out := inspect(t, service, `{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{$v.IPAddress}}{{end}}`)
	network, ip, _ = strings.Cut(out, " ")
	return network, ip
}

func getJSON(url string, v any) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

func post(url, body string) (int, string, error) {
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

type member struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	State   string `json:"state"`
}

type status struct {
	Leader  string   `json:"leader"`
	Voters  []string `json:"voters"`
	Members []member `json:"members"`
	Workers int      `json:"workers"`
}

type registryWorker struct {
	ID    int    `json:"id"`
	URL   string `json:"url"`
	State string `json:"state"`
}

// converged checks that every replica sees the same leader, the three
// replicas alive and voting, and the four workers.
func converged() error {
	leader := ""
	for _, n := range replicaNames {
		var s status
		if err := getJSON(replicas[n]+"/cluster/status", &s); err != nil {
			return err
		}
		alive := 0
		for _, m := range s.Members {
			if m.State == "alive" {
				alive++
			}
		}
		if s.Leader == "" || (leader != "" && s.Leader != leader) || len(s.Voters) != 3 || alive != 3 || s.Workers != 4 {
			return fmt.Errorf("%s sees %+v", n, s)
		}
		leader = s.Leader
		resp, err := client.Get(replicas[n] + "/readiness")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s not ready: %d", n, resp.StatusCode)
		}
	}
	return nil
}

func clusterFormed(t *testing.T) {
	t.Helper()
	testwait.EventuallyNil(t, 120*time.Second, converged, "the cluster to form")
}

func leaderName(t *testing.T) string {
	t.Helper()
	var s status
	testwait.EventuallyNil(t, 30*time.Second, func() error {
		for _, n := range replicaNames {
			if err := getJSON(replicas[n]+"/cluster/status", &s); err == nil && s.Leader != "" {
				return nil
			}
		}
		return fmt.Errorf("no replica knows a leader")
	}, "a leader")
	return s.Leader
}

type loads struct {
	Workers []struct {
		URL       string `json:"url"`
		Load      int64  `json:"load"`
		LocalLoad int64  `json:"local_load"`
	} `json:"workers"`
}

// loadsDrain checks that in-flight counts return to zero on every replica
// once traffic stops, merged views included.
func loadsDrain(t *testing.T) {
	t.Helper()
	testwait.EventuallyNil(t, 30*time.Second, func() error {
		for _, n := range replicaNames {
			var l loads
			if err := getJSON(replicas[n]+"/get_loads", &l); err != nil {
				return err
			}
			for _, w := range l.Workers {
				if w.Load != 0 || w.LocalLoad != 0 {
					return fmt.Errorf("%s: %s load %d (local %d)", n, w.URL, w.Load, w.LocalLoad)
				}
			}
		}
		return nil
	}, "in-flight counts to return to zero")
}

// registryIdentical checks that every replica holds the same registry.
func registryIdentical(t *testing.T) {
	t.Helper()
	testwait.EventuallyNil(t, 15*time.Second, func() error {
		var first []byte
		for _, n := range replicaNames {
			resp, err := client.Get(replicas[n] + "/workers")
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if first == nil {
				first = b
			} else if !bytes.Equal(first, b) {
				return fmt.Errorf("%s holds %s, r1 %s", n, b, first)
			}
		}
		return nil
	}, "every replica to hold the same registry")
}

// workerState is the state of worker id as replica n sees it.
func workerState(n string, id int) (string, error) {
	var w struct{ Workers []registryWorker }
	if err := getJSON(replicas[n]+"/workers", &w); err != nil {
		return "", err
	}
	for _, x := range w.Workers {
		if x.ID == id {
			return x.State, nil
		}
	}
	return "", fmt.Errorf("%s has no worker %d", n, id)
}

// setState drains or activates worker id through replica n, retrying while
// no leader is reachable.
func setState(t *testing.T, n string, id int, action string) {
	t.Helper()
	testwait.EventuallyNil(t, 30*time.Second, func() error {
		code, body, err := post(fmt.Sprintf("%s/workers/%d/%s", replicas[n], id, action), "{}")
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	}, "%s worker %d through %s", action, id, n)
}

// everyoneSees waits until every replica sees worker id in state.
func everyoneSees(t *testing.T, id int, state string) {
	t.Helper()
	testwait.EventuallyNil(t, 15*time.Second, func() error {
		for _, n := range replicaNames {
			st, err := workerState(n, id)
			if err != nil {
				return err
			}
			if st != state {
				return fmt.Errorf("%s sees it %s", n, st)
			}
		}
		return nil
	}, "every replica to see worker %d %s", id, state)
}

// workerFault sets a workersim's fault through its admin API.
func workerFault(t *testing.T, w, fault string) {
	t.Helper()
	code, body, err := post(workers[w]+"/admin/fault", fault)
	if err != nil || code != 200 {
		t.Fatalf("fault %s on %s: %d %s %v", fault, w, code, body, err)
	}
}

// figures are what one scenario reports.
type figures struct {
	name        string
	convergence time.Duration // from healing to a converged cluster
	stats       loadStats
	hitBefore   float64
	hitAfter    float64
}

var report []figures

func (f figures) row() string {
	return fmt.Sprintf("| %s | %.1f s | %d | %d | %d | %d | %d | %.3f | %.3f |", f.name, f.convergence.Seconds(), f.stats.requests,
		f.stats.retried, f.stats.cutVisibly, f.stats.silentCuts, f.stats.failed, f.hitBefore, f.hitAfter)
}

const reportHeader = "| scenario | converged after healing | requests | retried by the client | streams cut visibly | cut silently | failed | hit rate before | hit rate after |\n|---|---|---|---|---|---|---|---|---|"

// TestMain prints the figures of every scenario that ran, as tables, and
// writes it to $CHAOS_REPORT when set.
func TestMain(m *testing.M) {
	code := m.Run()
	if len(report) > 0 || len(recoveries) > 0 {
		var b strings.Builder
		if len(report) > 0 {
			b.WriteString(reportHeader + "\n")
			for _, f := range report {
				b.WriteString(f.row() + "\n")
			}
		}
		if len(recoveries) > 0 {
			if len(report) > 0 {
				b.WriteString("\n")
			}
			b.WriteString(recoveryHeader + "\n")
			for _, r := range recoveries {
				b.WriteString(r.row() + "\n")
			}
		}
		fmt.Print("\nchaos figures:\n" + b.String())
		if path := os.Getenv("CHAOS_REPORT"); path != "" {
			_ = os.WriteFile(path, []byte(b.String()), 0o644)
		}
	}
	os.Exit(code)
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
