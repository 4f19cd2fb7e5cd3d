package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/admin/admintest"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/loadsync"
)

// keyringStep posts one rotation step to r's admin API and returns the
// status and every replica's keyring.
func (c *testCluster) keyringStep(r *Replica, op string, key []byte) (int, []adminapi.NodeKeyring) {
	c.t.Helper()
	reply := c.do(r, http.MethodPost, "/cluster/keyring/"+op,
		jsonBody(c.t, map[string]string{"key": base64.StdEncoding.EncodeToString(key)}))
	var body struct{ Nodes []adminapi.NodeKeyring }
	if err := json.Unmarshal([]byte(reply.Body), &body); err != nil {
		c.t.Fatalf("keyring %s: %d %s", op, reply.Status, reply.Body)
	}
	return reply.Status, body.Nodes
}

// expectKeyrings checks that every one of names reports primary and
// exactly installed (as fingerprints of the keys), without error.
func expectKeyrings(t *testing.T, nodes []adminapi.NodeKeyring, names []string, primary []byte, installed ...[]byte) {
	t.Helper()
	var want []string
	for _, k := range installed {
		want = append(want, admin.KeyFingerprint(k))
	}
	slices.Sort(want)
	var got []string
	for _, n := range nodes {
		got = append(got, n.Node)
		keys := slices.Sorted(slices.Values(n.Keys))
		if n.Error != "" || n.Primary != admin.KeyFingerprint(primary) || !slices.Equal(keys, want) {
			t.Errorf("%s: primary %s, keys %v, error %q; want primary %s, keys %v", n.Node, n.Primary, keys, n.Error,
				admin.KeyFingerprint(primary), want)
		}
	}
	if !slices.Equal(got, names) {
		t.Fatalf("keyrings of %v, want %v", got, names)
	}
}

func TestGossipKeyRotatesWithoutARestart(t *testing.T) {
	old, next := []byte("old-key-0123456789abcdef"), []byte("new-key-0123456789abcdefghijklmn")
	certs := certDir(t, "r0", "r1", "r2", "late", "stale")
	c := newTestCluster(t, 1)
	c.startN(3, withTLS(certs), withKey(old))
	c.waitReady()
	via, all := c.replicas["r1"], []string{"r0", "r1", "r2"}

	status, nodes := c.keyringStep(via, "install", next)
	admintest.ExpectStatus(t, admintest.Reply{Status: status}, http.StatusOK)
	expectKeyrings(t, nodes, all, old, old, next)

	t.Run("a step that fails names the replicas", func(t *testing.T) {
		status, nodes := c.keyringStep(via, "remove", old) // still the primary everywhere
		if status != http.StatusBadGateway || len(nodes) != 3 || !strings.Contains(nodes[0].Error, "primary") {
			t.Fatalf("removing the key in use: %d %+v", status, nodes)
		}
		expectKeyrings(t, []adminapi.NodeKeyring{{Node: "r0", Primary: nodes[0].Primary, Keys: nodes[0].Keys}}, []string{"r0"}, old, old, next)
	})

	status, nodes = c.keyringStep(via, "use", next)
	admintest.ExpectStatus(t, admintest.Reply{Status: status}, http.StatusOK)
	expectKeyrings(t, nodes, all, next, old, next)
	status, nodes = c.keyringStep(via, "remove", old)
	admintest.ExpectStatus(t, admintest.Reply{Status: status}, http.StatusOK)
	expectKeyrings(t, nodes, all, next, next)

	var listed struct{ Nodes []adminapi.NodeKeyring }
	if err := json.Unmarshal([]byte(c.get(c.replicas["r2"], "/cluster/keyring").Body), &listed); err != nil {
		t.Fatal(err)
	}
	expectKeyrings(t, listed.Nodes, all, next, next)

	// The cluster now speaks the new key only.
	stale := c.config("stale", 3, []string{via.GossipAddr()}, withKey(old))
	if _, err := Start(context.Background(), stale); !errors.Is(err, loadsync.ErrGossipKey) {
		t.Fatalf("a replica with the retired key: %v, want ErrGossipKey", err)
	}
	lead := c.leader() // of the three: the newcomer knows it only once the leader has added it
	c.start(c.config("late", 3, []string{via.GossipAddr()}, withKey(next)))
	testwait.EventuallyNil(t, testDeadline, func() error {
		servers := raftServers(t, lead)
		for _, s := range servers {
			if s.ID == "late" && s.Suffrage == "nonvoter" {
				return nil
			}
		}
		return fmt.Errorf("%s's raft configuration is %+v", lead.cfg.NodeName, servers)
	}, "a replica with the new key joins")
}

func TestKeyringNeedsAReplicaStartedWithAGossipKey(t *testing.T) {
	c := newTestCluster(t, 1)
	r := c.start(c.config("r0", 1, nil))
	reply := c.do(r, http.MethodPost, "/cluster/keyring/install",
		jsonBody(t, map[string]string{"key": base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))}))
	if admintest.ExpectStatus(t, reply, http.StatusConflict); !strings.Contains(reply.APIError(t).Message, "without a gossip key") {
		t.Fatalf("body %s", reply.Body)
	}
	admintest.ExpectStatus(t, c.do(r, http.MethodPost, "/cluster/keyring/install", `{"key":"c2hvcnQ="}`), http.StatusBadRequest)
}
