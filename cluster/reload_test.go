package cluster

import (
	"crypto/tls"
	"math/big"
	"os"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/cluster/link"
)

// servedSerial is the serial of the certificate r's cluster port presents.
func servedSerial(t *testing.T, r *Replica, client *tls.Config) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", r.RaftAddr(), client)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

func TestReloadSwapsTheClusterCertificate(t *testing.T) {
	certs := certDir(t, "n1", "peer")
	cfg := testConfig(t, t.TempDir())
	cfg.ClusterTLS = link.NodeTLSFiles(certs, "n1")
	r := startReplica(t, cfg)
	peer := presenting(t, link.NodeTLSFiles(certs, "peer"))
	first := servedSerial(t, r, peer)

	// A new certificate from the same CA, written where the old one was.
	for _, f := range []string{cfg.ClusterTLS.CertFile, cfg.ClusterTLS.KeyFile} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := link.WriteCerts(certs, []string{"n1"}, link.CertOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	second := servedSerial(t, r, peer)
	if second.Cmp(first) == 0 {
		t.Fatal("the port still presents the old certificate after Reload")
	}

	// A broken file is refused, naming the flag, and the last good
	// certificate stays in use.
	if err := os.WriteFile(cfg.ClusterTLS.CertFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := r.Reload()
	if err == nil || !strings.Contains(err.Error(), "cluster TLS") || !strings.Contains(err.Error(), "--cluster-tls-cert") {
		t.Fatalf("Reload = %v, want a failure naming cluster TLS and --cluster-tls-cert", err)
	}
	if got := servedSerial(t, r, peer); got.Cmp(second) != 0 {
		t.Fatal("a failed reload changed the certificate in use")
	}
}

func TestReloadWithoutReloadablePartsDoesNothing(t *testing.T) {
	r := startReplica(t, testConfig(t, t.TempDir()))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
}
