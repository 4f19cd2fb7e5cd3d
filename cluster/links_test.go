package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/kvrouter/kvrouter/cluster/admin/admintest"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/store"
)

// These tests attack a replica's cluster port as a stranger on the network
// would: forged Raft RPCs and forwarded writes, with no certificate, with a
// certificate of another CA, or speaking hashicorp/raft's own protocol.
// Each checks the registry afterwards; TestForgeriesTakeOverAReplicaWithoutClusterTLS
// shows the same forgeries do take over a replica that runs without
// cluster TLS, so the attacks are real.

// attackerWorker is the URL an attacker wants registered: it would then
// receive users' prompts. On loopback, so that a health check of it (in the
// control test) stays on this host.
const attackerWorker = "http://127.0.0.1:9/attacker"

// securedVictim is a lone replica with cluster TLS, a gossip key and an
// admin token: everything the operator can set.
func securedVictim(t *testing.T, certs string) *Replica {
	cfg := testConfig(t, t.TempDir(), echoWorker(t, "w1"))
	cfg.NodeName = "victim"
	cfg.ClusterTLS = link.NodeTLSFiles(certs, "victim")
	cfg.GossipKey = []byte("0123456789abcdef")
	cfg.AdminToken = "s3cret"
	return startReplica(t, cfg)
}

func TestForgedRaftRPCsDoNotChangeTheRegistry(t *testing.T) {
	victim := securedVictim(t, certDir(t, "victim"))
	ways := intruders(t, certDir(t, "intruder"), link.KindRaft)
	ways["hashicorp/raft's own TCP transport"] = intruder{link: -1}
	target := raft.ServerAddress(victim.RaftAddr())
	for name, in := range ways {
		t.Run(name+" sends AppendEntries", func(t *testing.T) {
			before, term := victim.raft.Port().Refused(), victim.raft.Term()
			var resp raft.AppendEntriesResponse
			err := raftClient(t, in).AppendEntries("victim", target, forgedAppendEntries(t, victim, attackerWorker), &resp)
			if err == nil {
				t.Fatalf("the forged AppendEntries was answered: %+v", resp)
			}
			waitRefusals(t, victim, before)
			if registryHolds(victim, attackerWorker) || victim.raft.Term() != term {
				t.Fatalf("the forgery changed the replica: attacker registered %v, term %d -> %d",
					registryHolds(victim, attackerWorker), term, victim.raft.Term())
			}
		})
		t.Run(name+" sends InstallSnapshot", func(t *testing.T) {
			before, term := victim.raft.Port().Refused(), victim.raft.Term()
			req, data := forgedSnapshot(t, victim, attackerWorker)
			var resp raft.InstallSnapshotResponse
			err := raftClient(t, in).InstallSnapshot("victim", target, req, &resp, strings.NewReader(string(data)))
			if err == nil {
				t.Fatalf("the forged InstallSnapshot was answered: %+v", resp)
			}
			waitRefusals(t, victim, before)
			if registryHolds(victim, attackerWorker) || victim.raft.Term() != term || victim.fsm.View().Len() != 1 {
				t.Fatalf("the forgery changed the replica: %d workers, term %d -> %d", victim.fsm.View().Len(), term, victim.raft.Term())
			}
		})
	}
}

// TestForgeriesTakeOverAReplicaWithoutClusterTLS is why cluster TLS exists,
// and the proof that the forgeries above are well-formed.
func TestForgeriesTakeOverAReplicaWithoutClusterTLS(t *testing.T) {
	plain := intruder{link: int(link.KindRaft)}
	t.Run("AppendEntries", func(t *testing.T) {
		victim := startReplica(t, testConfig(t, t.TempDir(), echoWorker(t, "w1")))
		var resp raft.AppendEntriesResponse
		err := raftClient(t, plain).AppendEntries("n1", raft.ServerAddress(victim.RaftAddr()),
			forgedAppendEntries(t, victim, attackerWorker), &resp)
		if err != nil || !resp.Success {
			t.Fatalf("AppendEntries: %v, %+v", err, resp)
		}
		testwait.Eventually(t, testDeadline, func() bool { return registryHolds(victim, attackerWorker) }, "the attacker's worker is registered")
	})
	t.Run("InstallSnapshot", func(t *testing.T) {
		victim := startReplica(t, testConfig(t, t.TempDir(), echoWorker(t, "w1")))
		req, data := forgedSnapshot(t, victim, attackerWorker)
		var resp raft.InstallSnapshotResponse
		err := raftClient(t, plain).InstallSnapshot("n1", raft.ServerAddress(victim.RaftAddr()), req, &resp,
			strings.NewReader(string(data)))
		if err != nil || !resp.Success {
			t.Fatalf("InstallSnapshot: %v, %+v", err, resp)
		}
		testwait.Eventually(t, testDeadline, func() bool {
			return registryHolds(victim, attackerWorker) && victim.fsm.View().Len() == 1
		}, "the registry is the attacker's")
	})
}

func TestForwardedWritesNeedAClusterCertificate(t *testing.T) {
	certs := certDir(t, "victim", "peer")
	victim := securedVictim(t, certs)
	for name, in := range intruders(t, certDir(t, "intruder"), link.KindRPC) {
		t.Run(name, func(t *testing.T) {
			before := victim.raft.Port().Refused()
			if status := forwardedWrite(t, victim.RaftAddr(), in, attackerWorker); status != 0 {
				t.Fatalf("the forged write was answered %d", status)
			}
			waitRefusals(t, victim, before)
			if registryHolds(victim, attackerWorker) {
				t.Fatal("the forged write was applied")
			}
		})
	}
	t.Run("the API port takes no forwarded writes, even with the admin token", func(t *testing.T) {
		body, _ := store.NewAddWorker(store.AddWorker{URL: attackerWorker}).Encode()
		req, _ := http.NewRequest(http.MethodPost, "http://"+victim.HTTPAddr()+raftnode.ApplyPath, strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer s3cret")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		http.DefaultClient.CloseIdleConnections()
		if resp.StatusCode != http.StatusNotFound || registryHolds(victim, attackerWorker) {
			t.Fatalf("POST %s on the API port: %d, applied %v", raftnode.ApplyPath, resp.StatusCode, registryHolds(victim, attackerWorker))
		}
	})
	t.Run("a replica's certificate is let in", func(t *testing.T) {
		peer := intruder{tls: presenting(t, link.NodeTLSFiles(certs, "peer")), link: int(link.KindRPC)}
		if status := forwardedWrite(t, victim.RaftAddr(), peer, attackerWorker); status != http.StatusOK {
			t.Fatalf("a forwarded write with a cluster certificate: status %d", status)
		}
		testwait.Eventually(t, testDeadline, func() bool { return registryHolds(victim, attackerWorker) }, "the write applies")
	})
}

func TestReplicasTalkMutualTLSWithCertificatesFromTLSInit(t *testing.T) {
	certs := certDir(t, "r0", "r1", "r2", "operator")
	c := newTestCluster(t, 2)
	c.startN(3, withTLS(certs), withKey([]byte("0123456789abcdef0123456789abcdef")))
	c.waitReady()
	lead, f := c.leader(), c.follower()
	added := c.do(f, http.MethodPost, "/workers", `{"url":"http://127.0.0.1:2"}`)
	admintest.ExpectStatus(t, added, http.StatusCreated)
	c.waitRegistryEverywhere("the write forwarded over TLS", func(reg *store.Registry) bool { return reg.Len() == 3 })

	// What a peer sees of the leader's cluster port: TLS 1.3, and a
	// certificate of the cluster CA naming the leader.
	conn, err := tls.Dial("tcp", lead.RaftAddr(), presenting(t, link.NodeTLSFiles(certs, "operator")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := conn.ConnectionState()
	caPEM, _ := os.ReadFile(link.NodeTLSFiles(certs, "r0").CAFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	leaf := st.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the leader's certificate does not chain to the cluster CA: %v", err)
	}
	if st.Version != tls.VersionTLS13 || leaf.Subject.CommonName != lead.cfg.NodeName {
		t.Fatalf("TLS version %#x, certificate of %q; want TLS 1.3 from %s", st.Version, leaf.Subject.CommonName, lead.cfg.NodeName)
	}
	old := presenting(t, link.NodeTLSFiles(certs, "operator"))
	old.MaxVersion = tls.VersionTLS12
	if conn, err := tls.Dial("tcp", lead.RaftAddr(), old); err == nil {
		conn.Close()
		t.Fatal("the cluster port accepted TLS 1.2")
	}
}

func TestAReplicaWithAnotherCAsCertificateIsRefused(t *testing.T) {
	c := newTestCluster(t, 1)
	first := c.start(c.config("r0", 1, nil, withTLS(certDir(t, "r0"))))
	stranger := c.start(c.config("r1", 1, []string{first.GossipAddr()}, withTLS(certDir(t, "r1"))))
	// The gossip lets it in (no gossip key here), so the leader adds it to
	// Raft and tries to replicate to it: every handshake fails.
	testwait.Eventually(t, testDeadline, func() bool {
		return suffrageOf(t, first, "r1") == "nonvoter" && stranger.raft.Port().Refused() > 0
	}, "the leader adds r1 and their handshakes fail")
	if n := stranger.fsm.View().Len(); n != 0 {
		t.Fatalf("r1 received a registry of %d workers over a link it should not have", n)
	}
	if id, _ := stranger.raft.Leader(); id != "" {
		t.Fatalf("r1 follows leader %q", id)
	}
	r := c.do(stranger, http.MethodPost, "/workers", fmt.Sprintf(`{"url":%q}`, attackerWorker))
	admintest.ExpectStatus(t, r, http.StatusServiceUnavailable)
	if registryHolds(first, attackerWorker) {
		t.Fatal("a write through r1 reached the leader")
	}
}

func TestStartRefusesClusterTLSFilesThatDoNotMakeAnIdentity(t *testing.T) {
	certs := certDir(t, "n1")
	other := certDir(t, "n1")
	cases := map[string]struct {
		files   link.TLSFiles
		mention string
	}{
		"a missing key": {link.TLSFiles{CertFile: link.NodeTLSFiles(certs, "n1").CertFile, KeyFile: certs + "/nope.pem",
			CAFile: link.NodeTLSFiles(certs, "n1").CAFile}, "--cluster-tls-cert"},
		"a certificate of another CA": {link.TLSFiles{CertFile: link.NodeTLSFiles(other, "n1").CertFile,
			KeyFile: link.NodeTLSFiles(other, "n1").KeyFile, CAFile: link.NodeTLSFiles(certs, "n1").CAFile}, "not signed by the CA"},
		"a CA file without a certificate": {link.TLSFiles{CertFile: link.NodeTLSFiles(certs, "n1").CertFile,
			KeyFile: link.NodeTLSFiles(certs, "n1").KeyFile, CAFile: link.NodeTLSFiles(certs, "n1").KeyFile}, "--cluster-tls-ca"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			cfg.ClusterTLS = tc.files
			r, err := Start(context.Background(), cfg)
			if err == nil {
				_ = r.Stop(context.Background())
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.mention)
			}
		})
	}
}

// Strangers that connect and say nothing are cut at the handshake deadline
// and, beyond a few per address, at once, so that they cannot fill the
// pending slots: a peer still gets through while they wait.
func TestSilentStrangersHoldUpNoPeer(t *testing.T) {
	certs := certDir(t, "victim", "peer")
	victim := securedVictim(t, certs)
	port := victim.raft.Port()
	port.SetPendingLimits(8, 2) // scaled down from 1024 and 16
	before := port.Refused()
	stranger := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var silent []net.Conn
	for range 20 {
		conn, err := stranger.Dial("tcp", victim.RaftAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		silent = append(silent, conn)
	}
	// The port takes connections in order: by the time it takes the
	// peer's, it has held two of the strangers' and dropped the others.
	peer := intruder{tls: presenting(t, link.NodeTLSFiles(certs, "peer")), link: int(link.KindRPC)}
	if status := forwardedWrite(t, victim.RaftAddr(), peer, attackerWorker); status != http.StatusOK {
		t.Fatalf("a peer among silent strangers: status %d", status)
	}
	if n := port.Refused() - before; n < 18 {
		t.Fatalf("%d strangers dropped at once, want 18", n)
	}
	for i, conn := range silent {
		_ = conn.SetReadDeadline(time.Now().Add(testDeadline))
		var b [1]byte
		_, err := conn.Read(b[:])
		if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
			t.Fatalf("silent connection %d still open: %v", i, err)
		}
	}
}

// TestEveryClusterEndpointNeedsAClusterCertificate walks the cluster port's
// route table: every endpoint (a forwarded write, a keyring step, the
// placer) refuses a connection without a certificate of the cluster CA,
// answers one with it, and is not served on the API port at all.
func TestEveryClusterEndpointNeedsAClusterCertificate(t *testing.T) {
	certs := certDir(t, "victim", "peer")
	cfg := testConfig(t, t.TempDir(), echoWorker(t, "w1"))
	cfg.NodeName, cfg.ClusterTLS, cfg.GossipKey, cfg.AdminToken = "victim", link.NodeTLSFiles(certs, "victim"), []byte("0123456789abcdef"), "s3cret"
	cfg.Placer = true
	victim := startReplica(t, cfg)
	peer := intruder{tls: presenting(t, link.NodeTLSFiles(certs, "peer")), link: int(link.KindRPC)}
	routes := victim.rpcRoutes()
	if _, ok := routes[placePath]; !ok {
		t.Fatalf("the route table %v has no placer", routes)
	}
	for path := range routes {
		for name, in := range intruders(t, certDir(t, "intruder"), link.KindRPC) {
			before := victim.raft.Port().Refused()
			if status := postThrough(t, victim.RaftAddr(), in, path, []byte("{}")); status != 0 {
				t.Errorf("%s: %s was answered %d", path, name, status)
			}
			waitRefusals(t, victim, before)
		}
		if status := postThrough(t, victim.RaftAddr(), peer, path, []byte("{}")); status == 0 {
			t.Errorf("%s: a replica's certificate got no answer", path)
		}
		resp, err := http.Post("http://"+victim.HTTPAddr()+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s on the API port: %d, want 404", path, resp.StatusCode)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}
