package link

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s is not PEM", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestWriteCertsMakesACAAndACertificatePerNode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	written, err := WriteCerts(dir, []string{"r1", "r2"}, CertOptions{SANs: []string{"10.0.0.7", "router.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 6 {
		t.Fatalf("wrote %v", written)
	}
	ca := readCert(t, filepath.Join(dir, "ca.pem"))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, node := range []string{"r1", "r2"} {
		files := NodeTLSFiles(dir, node)
		cert := readCert(t, files.CertFile)
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s for %v: %v", node, usage, err)
			}
		}
		if cert.Subject.CommonName != node || !strings.Contains(strings.Join(cert.DNSNames, ","), node) ||
			len(cert.IPAddresses) != 1 || cert.IsCA {
			t.Errorf("%s: CN %q, DNS %v, IPs %v, CA %v", node, cert.Subject.CommonName, cert.DNSNames, cert.IPAddresses, cert.IsCA)
		}
		if st, err := os.Stat(files.KeyFile); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: key mode %v (%v), want 0600", node, st.Mode().Perm(), err)
		}
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v (%v), want 0700", st.Mode().Perm(), err)
	}

	// A later run signs new nodes with the same CA and leaves existing
	// ones alone.
	if _, err := WriteCerts(dir, []string{"r3"}, CertOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := readCert(t, NodeTLSFiles(dir, "r3").CertFile).Verify(x509.VerifyOptions{Roots: pool,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("r3 is not signed by the same CA: %v", err)
	}
	if _, err := WriteCerts(dir, []string{"r1"}, CertOptions{}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("overwriting r1: %v", err)
	}
	for _, bad := range []string{"../escape", "", "a/b"} {
		if _, err := WriteCerts(dir, []string{bad}, CertOptions{}); err == nil {
			t.Errorf("node name %q accepted", bad)
		}
	}
}
