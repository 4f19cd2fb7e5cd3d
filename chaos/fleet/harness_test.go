//go:build chaos

package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// The fleet of docker-compose.yml: replicas r1..r8 at fixed addresses, workers w1..w64.
const (
	project    = "kvrouter-chaos-fleet"
	adminToken = "chaos-admin-token"
	nReplicas  = 8
	nWorkers   = 64
	routerPort = 8080
)

var replicaNames = func() []string {
	var out []string
	for i := 1; i <= nReplicas; i++ {
		out = append(out, fmt.Sprintf("r%d", i))
	}
	return out
}()

// replicaURL is replica n's address on the fleet network (172.28.7.1x, as composed).
func replicaURL(n string) string {
	return fmt.Sprintf("http://%s:%d", replicaIP(n), routerPort)
}

func replicaIP(n string) string {
	var i int
	fmt.Sscanf(n, "r%d", &i)
	return fmt.Sprintf("172.28.7.%d", 10+i)
}

// perHost is how many workers share a host's network namespace (PER_HOST of the compose file).
const perHost = 8

// workerURL is worker w's URL in the registry: wI listens on hostK:800J.
func workerURL(w string) string {
	var i int
	fmt.Sscanf(w, "w%d", &i)
	return fmt.Sprintf("http://host%d:%d", (i-1)/perHost+1, 8000+(i-1)%perHost)
}

// compose runs docker compose (CHAOS_COMPOSE, as scripts/chaos-fleet.sh found it: the plugin or
// docker-compose v1) on the fleet's project.
func compose(t testing.TB, args ...string) string {
	t.Helper()
	out, err := composeErr(args...)
	if err != nil {
		t.Fatalf("compose %v: %v\n%s", args, err, out)
	}
	return out
}

func composeErr(args ...string) (string, error) {
	cmd := strings.Fields(os.Getenv("CHAOS_COMPOSE"))
	if len(cmd) == 0 {
		cmd = []string{"docker-compose"}
	}
	cmd = append(cmd, append([]string{"-f", "docker-compose.yml", "-p", project}, args...)...)
	out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func docker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func containerID(t testing.TB, service string) string { return compose(t, "ps", "-q", service) }

func containerPid(t testing.TB, service string) string {
	return docker(t, "inspect", "-f", "{{.State.Pid}}", containerID(t, service))
}

// up starts the fleet and tears it down, volumes and network included, when the test ends,
// whatever way it ends. CHAOS_FLEET_KEEP=1 leaves a running fleet up (for a rerun by hand).
func up(t *testing.T) {
	t.Helper()
	if _, err := composeErr("down", "-v", "--remove-orphans"); err != nil {
		t.Logf("down before up: %v", err)
	}
	t.Cleanup(func() {
		if os.Getenv("CHAOS_FLEET_KEEP") == "1" {
			return
		}
		if logs, err := composeErr("logs", "--no-color", "--tail", "400"); err == nil {
			_ = os.WriteFile("chaos-fleet.log", []byte(logs), 0o644)
		}
		if out, err := composeErr("down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Logf("down: %v\n%s", err, out)
		}
	})
	start := time.Now()
	compose(t, "up", "-d", "--build")
	t.Logf("fleet of %d replicas and %d workers up in %.0f s", nReplicas, nWorkers, time.Since(start).Seconds())
}

// The test dials from the client container's network namespace: the replicas' addresses are
// those of the fleet network, whether or not the host routes to it.
var netnsFD = -1

func enterClientNetns(t *testing.T) {
	t.Helper()
	f, err := os.Open("/proc/" + containerPid(t, "client") + "/ns/net")
	if err != nil {
		t.Fatalf("the client container's network namespace: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	netnsFD = int(f.Fd())
}

// dialInNetns makes the socket on a thread moved into the client's namespace (a socket stays in
// the namespace it was made in), then moves the thread back; a thread that cannot go back is
// left locked, so the runtime ends it.
func dialInNetns(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer self.Close()
		if err := unix.Setns(netnsFD, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("setns: %v", err)}
			return
		}
		c, err := (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, network, addr)
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

func newTransport() *http.Transport {
	return &http.Transport{DialContext: dialInNetns, MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: 30 * time.Second,
		IdleConnTimeout: 30 * time.Second}
}

// admin is the client of the replicas' admin API.
var admin = &http.Client{Timeout: 10 * time.Second, Transport: bearer{newTransport()}}

type bearer struct{ next http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+adminToken)
	return b.next.RoundTrip(r)
}

func getJSON(url string, v any) error {
	resp, err := admin.Get(url)
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

func do(method, url, body string) (int, string, error) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := admin.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

type registryWorker struct {
	ID  int    `json:"id"`
	URL string `json:"url"`
}

// converged checks the fleet after a fault: every replica up and ready, one leader and one
// voter set that every replica names, all 8 replicas alive in every replica's membership, the
// same registry (byte for byte) on every replica with want workers, each healthy on every
// replica.
func converged(want int) error {
	var leader, voters string
	var registry []byte
	for _, n := range replicaNames {
		var s adminapi.Status
		if err := getJSON(replicaURL(n)+"/cluster/status", &s); err != nil {
			return err
		}
		alive := 0
		for _, m := range s.Members {
			if m.State == "alive" {
				alive++
			}
		}
		slices.Sort(s.Voters)
		v := strings.Join(s.Voters, ",")
		if s.Leader == "" || (leader != "" && (s.Leader != leader || v != voters)) || alive != nReplicas || s.Workers != want {
			return fmt.Errorf("%s sees leader %q, voters %s, %d members alive, %d workers", n, s.Leader, v, alive, s.Workers)
		}
		leader, voters = s.Leader, v
		resp, err := admin.Get(replicaURL(n) + "/workers")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if registry == nil {
			registry = b
		} else if !bytes.Equal(registry, b) {
			return fmt.Errorf("%s holds another registry than r1", n)
		}
		var l struct {
			Workers []struct {
				URL     string `json:"url"`
				Healthy bool   `json:"healthy"`
			} `json:"workers"`
		}
		if err := getJSON(replicaURL(n)+"/get_loads", &l); err != nil {
			return err
		}
		healthy := 0
		for _, w := range l.Workers {
			if w.Healthy {
				healthy++
			}
		}
		if healthy != want {
			return fmt.Errorf("%s sees %d of %d workers healthy", n, healthy, want)
		}
		resp, err = admin.Get(replicaURL(n) + "/readiness")
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

// convergence polls converged every 100 ms and returns how long it took from since.
func convergence(t *testing.T, since time.Time, want int) time.Duration {
	t.Helper()
	testwait.EventuallyNil(t, 180*time.Second, func() error { return converged(want) }, "the fleet to converge")
	return time.Since(since)
}

func leaderName(t *testing.T) string {
	t.Helper()
	var leader string
	testwait.EventuallyNil(t, 30*time.Second, func() error {
		for _, n := range replicaNames {
			var s adminapi.Status
			if err := getJSON(replicaURL(n)+"/cluster/status", &s); err == nil && s.Leader != "" {
				leader = s.Leader
				return nil
			}
		}
		return fmt.Errorf("no replica knows a leader")
	}, "a leader")
	return leader
}

// registryIDs maps each worker's URL to its registry id, as replica n holds it.
func registryIDs(n string) (map[string]int, error) {
	var w struct{ Workers []registryWorker }
	if err := getJSON(replicaURL(n)+"/workers", &w); err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, x := range w.Workers {
		out[x.URL] = x.ID
	}
	return out, nil
}

// ready reports whether replica n answers /readiness with 200.
func ready(n string) bool {
	resp, err := admin.Get(replicaURL(n) + "/readiness")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// nsIptables runs iptables in the network namespace of a container this test created.
func nsIptables(t *testing.T, pid string, args ...string) {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"-t", pid, "-n", "iptables"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("iptables %v in %s's namespace: %v\n%s", args, pid, err, out)
	}
}

// figures are what one scenario reports.
type figures struct {
	name        string
	stats       loadStats
	convergence time.Duration
	note        string
}

var (
	reportMu sync.Mutex
	report   []figures
)

const reportHeader = "| scenario | requests | failed (of those, in flight on a killed replica) | cut silently | follow-ups on their worker | follow-ups not counted (their worker removed) | converged after the fault | note |\n|---|---|---|---|---|---|---|---|"

func (f figures) row() string {
	s := f.stats
	return fmt.Sprintf("| %s | %d | %d (%d) | %d | %d/%d = %.4f | %d | %.1f s | %s |", f.name, s.requests, s.failed, s.failedOnKilled,
		s.silentCuts, s.stayed, s.followUps, s.stayShare(), s.excluded, f.convergence.Seconds(), f.note)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if len(report) > 0 {
		var b strings.Builder
		b.WriteString(reportHeader + "\n")
		for _, f := range report {
			b.WriteString(f.row() + "\n")
		}
		fmt.Print("\nfleet chaos figures:\n" + b.String())
		if path := os.Getenv("CHAOS_REPORT"); path != "" {
			_ = os.WriteFile(path, []byte(b.String()), 0o644)
		}
	}
	os.Exit(code)
}
