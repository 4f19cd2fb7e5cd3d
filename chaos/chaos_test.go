//go:build chaos

package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// replicas are the routers' published ports on loopback.
var replicas = map[string]string{
	"r1": "http://127.0.0.1:18081",
	"r2": "http://127.0.0.1:18082",
	"r3": "http://127.0.0.1:18083",
}

// adminToken is the compose cluster's --admin-token.
const adminToken = "chaos-admin-token"

var client = &http.Client{Timeout: 30 * time.Second, Transport: bearer{http.DefaultTransport}}

// bearer adds the admin token to every request.
type bearer struct{ next http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+adminToken)
	return b.next.RoundTrip(r)
}

func compose(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("docker-compose", append([]string{"-f", "../docker-compose.yml"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker-compose %v: %v\n%s", args, err, out)
	}
}

func eventually(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func getJSON(url string, v any) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

type status struct {
	Leader  string   `json:"leader"`
	Voters  []string `json:"voters"`
	Workers int      `json:"workers"`
}

type loads struct {
	Workers []struct {
		URL       string `json:"url"`
		Load      int64  `json:"load"`
		LocalLoad int64  `json:"local_load"`
		Healthy   bool   `json:"healthy"`
	} `json:"workers"`
}

func complete(base, prompt string) (worker string, code int, err error) {
	body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":8}`, prompt)
	resp, err := client.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.Header.Get("x-worker-id"), resp.StatusCode, nil
}

// clusterFormed waits until every listed replica sees the same leader,
// three voters and the four workers.
func clusterFormed(t *testing.T, names ...string) {
	t.Helper()
	eventually(t, "the cluster to form", 90*time.Second, func() error {
		leader := ""
		for _, n := range names {
			var s status
			if err := getJSON(replicas[n]+"/cluster/status", &s); err != nil {
				return err
			}
			if s.Leader == "" || (leader != "" && s.Leader != leader) || len(s.Voters) != 3 || s.Workers != 4 {
				return fmt.Errorf("%s sees %+v", n, s)
			}
			leader = s.Leader
		}
		return nil
	})
}

// loadsDrain checks the invariant that in-flight counts return to zero on
// every replica once traffic stops, merged views included.
func loadsDrain(t *testing.T, names ...string) {
	t.Helper()
	eventually(t, "in-flight counts to return to zero", 30*time.Second, func() error {
		for _, n := range names {
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
	})
}

func TestClusterFormsAndAgrees(t *testing.T) {
	clusterFormed(t, "r1", "r2", "r3")
}

// TestAffinityHoldsAcrossReplicas sends the turns of one conversation to the
// replicas in turn: they must all land on the worker of the first turn.
func TestAffinityHoldsAcrossReplicas(t *testing.T) {
	clusterFormed(t, "r1", "r2", "r3")
	for c := range 8 {
		conv := strings.Repeat(fmt.Sprintf("conversation %d system prompt. ", c), 30)
		first := ""
		for turn, n := range []string{"r1", "r2", "r3", "r1", "r2", "r3"} {
			conv += fmt.Sprintf(" turn %d: user asks, assistant answers at length.", turn)
			w, code, err := complete(replicas[n], conv)
			if err != nil || code != 200 {
				t.Fatalf("conversation %d turn %d via %s: %d %v", c, turn, n, code, err)
			}
			if first == "" {
				first = w
			} else if w != first {
				t.Fatalf("conversation %d turn %d via %s went to %s, first turn to %s", c, turn, n, w, first)
			}
		}
	}
	loadsDrain(t, "r1", "r2", "r3")
}

// TestAKilledWorkerCostsRetriesNotFailures kills a worker under traffic.
func TestAKilledWorkerCostsRetriesNotFailures(t *testing.T) {
	clusterFormed(t, "r1", "r2", "r3")
	compose(t, "kill", "w2")
	defer compose(t, "start", "w2")
	for i := range 60 {
		n := []string{"r1", "r2", "r3"}[i%3]
		if _, code, err := complete(replicas[n], fmt.Sprintf("independent prompt %d with some text", i)); err != nil || code != 200 {
			t.Fatalf("request %d via %s: %d %v", i, n, code, err)
		}
	}
	loadsDrain(t, "r1", "r2", "r3")
}

// TestAdminWritesResumeAfterTheLeaderDies kills the Raft leader: another
// replica is elected and writes through any survivor succeed again; the
// killed replica, restarted, catches up.
func TestAdminWritesResumeAfterTheLeaderDies(t *testing.T) {
	clusterFormed(t, "r1", "r2", "r3")
	var s status
	if err := getJSON(replicas["r1"]+"/cluster/status", &s); err != nil {
		t.Fatal(err)
	}
	leader := s.Leader
	compose(t, "kill", leader)
	var survivor string
	for n := range replicas {
		if n != leader {
			survivor = n
		}
	}
	eventually(t, "an admin write through a survivor", 60*time.Second, func() error {
		resp, err := client.Post(replicas[survivor]+"/workers/4/drain", "application/json", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("drain: %d", resp.StatusCode)
		}
		return nil
	})
	compose(t, "start", leader)
	eventually(t, "the restarted replica to catch up", 90*time.Second, func() error {
		var w struct {
			Workers []struct {
				ID    int    `json:"id"`
				State string `json:"state"`
			} `json:"workers"`
		}
		if err := getJSON(replicas[leader]+"/workers", &w); err != nil {
			return err
		}
		for _, x := range w.Workers {
			if x.ID == 4 && x.State == "draining" {
				return nil
			}
		}
		return fmt.Errorf("%s does not see worker 4 draining: %+v", leader, w)
	})
	resp, err := client.Post(replicas[survivor]+"/workers/4/activate", "application/json", nil)
	if err == nil {
		resp.Body.Close()
	}
	clusterFormed(t, "r1", "r2", "r3")
}

// TestAPausedReplicaIsForgottenAndRejoins freezes a replica: the others
// drop its load reports after their TTL and keep routing; unfrozen, it
// rejoins and the views converge.
func TestAPausedReplicaIsForgottenAndRejoins(t *testing.T) {
	clusterFormed(t, "r1", "r2", "r3")
	compose(t, "pause", "r3")
	for i := range 30 {
		n := []string{"r1", "r2"}[i%2]
		if _, code, err := complete(replicas[n], fmt.Sprintf("while r3 sleeps %d", i)); err != nil || code != 200 {
			t.Fatalf("request %d via %s: %d %v", i, n, code, err)
		}
	}
	compose(t, "unpause", "r3")
	clusterFormed(t, "r1", "r2", "r3")
	loadsDrain(t, "r1", "r2", "r3")
}
