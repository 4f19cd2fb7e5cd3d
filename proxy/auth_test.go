package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func postKey(t *testing.T, url, key string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(completion("x", false)))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestAPIKeysAreRequiredAndNeverReachWorkers(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{APIKeys: []string{"k-one", "k-two"}, APIKey: "worker-key"}, w)
	for _, key := range []string{"", "wrong"} {
		if resp, body := postKey(t, r.url, key); resp.StatusCode != 401 || !strings.Contains(body, `"error"`) || (key != "" && strings.Contains(body, key)) {
			t.Fatalf("key %q: %d %s, want 401", key, resp.StatusCode, body)
		}
	}
	if w.Inference.Load() != 0 {
		t.Fatal("an unauthenticated request reached a worker")
	}
	if resp, body := postKey(t, r.url, "k-two"); resp.StatusCode != 200 {
		t.Fatalf("a valid key: %d %s", resp.StatusCode, body)
	}
	if got := w.LastHeader().Get("Authorization"); got != "Bearer worker-key" {
		t.Fatalf("the worker got Authorization %q, want the router's own --api-key", got)
	}
	r.proxy.SetAPIKeys([]string{"k-three"})
	if resp, _ := postKey(t, r.url, "k-two"); resp.StatusCode != 401 {
		t.Fatalf("a replaced key still works: %d", resp.StatusCode)
	}
	if resp, _ := postKey(t, r.url, "k-three"); resp.StatusCode != 200 {
		t.Fatalf("the new key: %d", resp.StatusCode)
	}
	if resp, _ := get(t, r.url+"/health"); resp.StatusCode != 200 {
		t.Fatalf("health needs no key: %d", resp.StatusCode)
	}
}

func TestTheClientListenerSpeaksTLSAndReloadsItsCertificate(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	pool := x509.NewCertPool()
	writeSelfSigned(t, certPath, keyPath, "first", pool)
	w := startFake(t, "w1")
	r := startRouter(t, Config{TLSCertPath: certPath, TLSKeyPath: keyPath}, w)
	url := strings.Replace(r.url, "http://", "https://", 1)
	if cn := tlsPost(t, url, pool); cn != "first" {
		t.Fatalf("certificate %q", cn)
	}
	writeSelfSigned(t, certPath, keyPath, "second", pool)
	if err := r.proxy.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if cn := tlsPost(t, url, pool); cn != "second" {
		t.Fatalf("after reload: certificate %q", cn)
	}
	if err := os.WriteFile(certPath, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.proxy.ReloadTLS(); err == nil {
		t.Fatal("a broken certificate was loaded")
	}
	if cn := tlsPost(t, url, pool); cn != "second" {
		t.Fatalf("a failed reload changed the certificate: %q", cn)
	}
}

// tlsPost posts a completion over TLS and returns the server certificate's
// common name.
func tlsPost(t *testing.T, url string, roots *x509.CertPool) string {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}}
	resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(completion("x", false)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.TLS.PeerCertificates[0].Subject.CommonName
}

func writeSelfSigned(t *testing.T, certPath, keyPath, cn string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool.AddCert(cert)
	kb, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestARefusedWorkerDestinationGetsNoTraffic(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{}, w)
	// A metadata address is refused on its URL: nothing is ever dialed.
	r.proxy.Fleet().SetWorkers([]Worker{{ID: 1, URL: "http://169.254.169.254:80", Role: RoleRegular}})
	if resp, _ := post(t, r.url, "/v1/completions", completion("x", false)); resp.StatusCode != 503 {
		t.Fatalf("status %d, want 503: the only worker is refused", resp.StatusCode)
	}
}
