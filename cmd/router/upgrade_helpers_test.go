package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// upgradeReplica is one replica of an upgrade test: fixed addresses and a
// data dir that every build it runs shares, as on a host being upgraded.
type upgradeReplica struct {
	name, http, raft, gossip, dir string
	proc                          *process
}

func (r *upgradeReplica) base() string { return "http://" + r.http }

// upgradeTier is three replicas seeded with workers; registered is every
// worker URL the registry should hold.
type upgradeTier struct {
	replicas   []*upgradeReplica
	workers    []string
	registered []string
	workersim  string
}

// newUpgradeTier starts three replicas of bin as one tier in front of
// workers and waits until each is ready with the whole registry.
func newUpgradeTier(t *testing.T, bin string, workers []string) *upgradeTier {
	t.Helper()
	_, workersim := binaries(t)
	tr := &upgradeTier{workers: workers, registered: slices.Clone(workers), workersim: workersim}
	for i := range 3 {
		tr.replicas = append(tr.replicas, &upgradeReplica{name: fmt.Sprintf("router-%d", i+1),
			http: freeAddr(t), raft: freeAddr(t), gossip: freeAddr(t), dir: t.TempDir()})
	}
	for i := range tr.replicas {
		tr.start(t, i, bin)
	}
	for i := range tr.replicas {
		tr.waitReady(t, i)
	}
	return tr
}

func (tr *upgradeTier) bases() []string {
	var out []string
	for _, r := range tr.replicas {
		out = append(out, r.base())
	}
	return out
}

// start runs bin as replica i: the same command line whichever build it is
// (every replica joining the others, the first seeding the workers), as a
// host's unit file would hold it.
func (tr *upgradeTier) start(t *testing.T, i int, bin string) {
	t.Helper()
	r := tr.replicas[i]
	host, port, _ := net.SplitHostPort(r.http)
	args := []string{"serve", "--host", host, "--port", port, "--raft-bind", r.raft, "--gossip-bind", r.gossip,
		"--data-dir", r.dir, "--node-name", r.name, "--bootstrap-expect", strconv.Itoa(len(tr.replicas)),
		"--prometheus-port", "0", "--retry-initial-backoff-ms", "1", "--health-check-interval-secs", "1"}
	if i == 0 {
		args = append(args, "--worker-urls", strings.Join(tr.workers, ","))
	}
	for j, o := range tr.replicas {
		if j != i {
			args = append(args, "--join", o.gossip)
		}
	}
	r.proc = start(t, bin, args...)
}

// stop stops replica i as an operator does, and waits for it to exit.
func (tr *upgradeTier) stop(t *testing.T, i int) {
	t.Helper()
	p := tr.replicas[i].proc
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(upgradeDeadline):
		t.Fatalf("%s did not stop within %v", tr.replicas[i].name, upgradeDeadline)
	}
}

// waitReady waits until replica i answers /readiness with 200.
func (tr *upgradeTier) waitReady(t *testing.T, i int) {
	t.Helper()
	r := tr.replicas[i]
	testwait.Eventually(t, upgradeDeadline, func() bool {
		resp, err := http.Get(r.base() + "/readiness")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "%s ready", r.name)
}

// addWorker registers one more workersim through replica i (forwarded to
// the leader, of whichever build), sent again while it answers 503.
func (tr *upgradeTier) addWorker(t *testing.T, i int) {
	t.Helper()
	_, url := startWorkersim(t, tr.workersim, fmt.Sprint("w", len(tr.registered)))
	r := tr.replicas[i]
	var last string
	testwait.Eventually(t, upgradeDeadline, func() bool {
		resp, err := http.Post(r.base()+"/workers", "application/json", strings.NewReader(fmt.Sprintf(`{"url":%q}`, url)))
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		return resp.StatusCode == http.StatusCreated
	}, "a worker added through %s (last answer: %v)", r.name, &last)
	tr.registered = append(tr.registered, url)
}

// registryURLs is the sorted worker URLs of a replica's registry, nil when
// it does not answer.
func registryURLs(base string) []string {
	resp, err := http.Get(base + "/workers")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Workers []struct {
			URL string `json:"url"`
		} `json:"workers"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil
	}
	var out []string
	for _, w := range body.Workers {
		out = append(out, w.URL)
	}
	slices.Sort(out)
	return out
}

// peersHeard is how many peers' load reports a replica heard within the
// last second, from its /metrics.
func peersHeard(base string) int {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "vllm_router_cluster_gossip_report_age_seconds{") {
			continue
		}
		age, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil && age < 1 {
			n++
		}
	}
	return n
}

// chatTraffic is clients sending growing chat conversations to every
// replica in turn, recording what failed, where, and whether that replica
// was being replaced then.
type chatTraffic struct {
	bases    []string
	ok       atomic.Int64
	current  atomic.Int64 // the replica being replaced, -1 for none
	mu       sync.Mutex
	failures []chatFailure
	seen     int64 // ok at the last waitAnswered
	done     chan struct{}
	wg       sync.WaitGroup
	client   *http.Client
}

type chatFailure struct {
	replica int
	allowed bool
	what    string
}

func startChatTraffic(t *testing.T, bases []string, clients int) *chatTraffic {
	c := &chatTraffic{bases: bases, done: make(chan struct{}),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}}
	c.current.Store(-1)
	for i := range clients {
		c.wg.Go(func() { c.converse(i) })
	}
	t.Cleanup(c.stop)
	return c
}

// replacing says which replica is being replaced from now on (-1: none).
func (c *chatTraffic) replacing(i int) { c.current.Store(int64(i)) }

// converse is one client: a conversation that grows by a turn a request,
// each turn to the next replica; a turn that fails is sent to the next
// replica at once, as a client behind a load balancer sees it retried, so
// that a turn no replica answered is a turn lost.
func (c *chatTraffic) converse(client int) {
	conv := fmt.Sprintf("You are agent %d. Work through the task step by step.", client)
	for turn := 0; ; turn++ {
		select {
		case <-c.done:
			return
		default:
		}
		conv += fmt.Sprintf(" Observation %d: the tool listed the files and their sizes.", turn)
		if !c.turn(client+turn, conv) {
			c.mu.Lock()
			c.failures = append(c.failures, chatFailure{replica: -1, what: "a turn no replica answered"})
			c.mu.Unlock()
		}
	}
}

// turn sends conv to replica first, then to the others in order until one
// answers, recording each failure; false when none did.
func (c *chatTraffic) turn(first int, conv string) bool {
	for k := range c.bases {
		i := (first + k) % len(c.bases)
		before := c.current.Load()
		err := c.ask(c.bases[i], conv)
		if err == nil {
			c.ok.Add(1)
			return true
		}
		allowed := before == int64(i) || c.current.Load() == int64(i)
		c.mu.Lock()
		c.failures = append(c.failures, chatFailure{replica: i, allowed: allowed, what: err.Error()})
		c.mu.Unlock()
	}
	return false
}

func (c *chatTraffic) ask(base, conv string) error {
	body := fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"user","content":%q}],"max_tokens":4}`, conv)
	resp, err := c.client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d %s", base, resp.StatusCode, b)
	}
	return nil
}

// waitAnswered waits until n more requests were answered since the last
// call: traffic flows through the tier as it now is.
func (c *chatTraffic) waitAnswered(t *testing.T, n int, what string) {
	t.Helper()
	from := c.seen
	testwait.Eventually(t, upgradeDeadline, func() bool { return c.ok.Load() >= from+int64(n) }, "%s: %d requests answered", what, n)
	c.seen = c.ok.Load()
}

// disallowedFailures describes the failures on replicas that were up.
func (c *chatTraffic) disallowedFailures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, f := range c.failures {
		if !f.allowed {
			out = append(out, fmt.Sprintf("replica %d: %s", f.replica+1, f.what)) // replica 0: none answered
		}
	}
	return out
}

func (c *chatTraffic) failedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.failures)
}

func (c *chatTraffic) stop() {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	c.wg.Wait()
	c.client.CloseIdleConnections()
}
