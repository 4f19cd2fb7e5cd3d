package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/proxy/bodyintake"
)

// adminToken is an admin API token for the proxy's /metrics rule.
type adminToken string

func (a adminToken) HasToken() bool            { return a != "" }
func (a adminToken) IsToken(token []byte) bool { return a != "" && string(token) == string(a) }

// serveProxyWith serves a proxy whose Deps adjust changes, in front of
// workers, and returns its base URL.
func serveProxyWith(t *testing.T, cfg Config, adjust func(*Deps), workers ...*fakeworker.Worker) (*Proxy, string) {
	t.Helper()
	var ws []Worker
	for i, w := range workers {
		ws = append(ws, Worker{ID: affinity.WorkerID(i + 1), URL: w.URL, Role: RoleRegular})
	}
	p, err := buildProxyWith(cfg, affinity.PolicyCacheAware, ws, adjust)
	if err != nil {
		t.Fatal(err)
	}
	return p, serveProxy(t, p)
}

// sendSample sends a route's sample request, with authorization when it
// is not empty, and returns the status.
func sendSample(t *testing.T, base, sample, authorization string) int {
	t.Helper()
	method, path, _ := strings.Cut(sample, " ")
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(completion("x", false))
	}
	req, _ := http.NewRequest(method, base+path, body)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", sample, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// The route table is walked, not a list of paths kept beside it: a route
// added to it without a key check fails here. With --api-keys every route
// but the three probes answers 401 without a key, contacts no worker and
// takes no admission token.
func TestEveryRouteButTheProbesNeedsTheKey(t *testing.T) {
	w := startFake(t, "w1")
	cfg := Config{APIKeys: []string{"k1"}, APIKey: "worker-key",
		Admission: admission.Config{Capacity: 1, RefillPerSec: 1e-6, QueueSize: 0}}
	_, base := serveProxyWith(t, cfg, func(d *Deps) { d.AdminToken = adminToken("adm") }, w)
	var openRoutes []string
	for _, rt := range routes {
		method, path, _ := strings.Cut(rt.sample, " ")
		if !rt.match([]byte(method), []byte(path)) {
			t.Fatalf("route %s does not match its own sample %q", rt.name, rt.sample)
		}
		if rt.access == open {
			openRoutes = append(openRoutes, rt.name)
		}
		for _, authz := range []string{"", "Bearer wrong", "Basic azE6", "Bearer adm"} {
			if authz == "Bearer adm" && rt.access == keyedOrAdmin {
				continue // the admin token opens /metrics
			}
			got := sendSample(t, base, rt.sample, authz)
			if rt.access != open && got != http.StatusUnauthorized {
				t.Errorf("%s with Authorization %q: %d, want 401", rt.sample, authz, got)
			}
			if rt.access == open && got == http.StatusUnauthorized {
				t.Errorf("the probe %s asks for a key", rt.sample)
			}
		}
	}
	if want := []string{"/health", "/liveness", "/readiness"}; !slices.Equal(openRoutes, want) {
		t.Fatalf("open routes %q, want only %q", openRoutes, want)
	}
	if got := sendSample(t, base, "GET /no/such/route", ""); got != http.StatusUnauthorized {
		t.Errorf("a path of no route without a key: %d, want 401", got)
	}
	for _, path := range w.Paths() {
		if path != "GET /v1/models" && path != "GET /metrics" { // the proxy's own discovery
			t.Fatalf("a request without the key reached the worker: %s (all: %q)", path, w.Paths())
		}
	}
	// The one admission token is still there: the 401s took none.
	if got := sendSample(t, base, "POST /v1/completions", "bearer k1"); got != http.StatusOK {
		t.Fatalf("the key, its scheme in lower case, after the refusals: %d, want 200", got)
	}
	if got := sendSample(t, base, "POST /v1/completions", "BEARER k1"); got != http.StatusTooManyRequests {
		t.Fatalf("a second request on a bucket of one token: %d, want 429", got)
	}
	if got := sendSample(t, base, "GET /metrics", "Bearer adm"); got != http.StatusOK {
		t.Fatalf("/metrics with the admin token: %d", got)
	}
	if got := sendSample(t, base, "GET /metrics", "Bearer k1"); got != http.StatusOK {
		t.Fatalf("/metrics with an API key: %d", got)
	}
}

// /metrics names every worker's URL: with an admin token and no API keys
// it wants the token; with neither it is open (the Prometheus port is the
// operator's to bind).
func TestMetricsNeedTheAdminTokenWhenOneIsSet(t *testing.T) {
	_, base := serveProxyWith(t, Config{}, func(d *Deps) { d.AdminToken = adminToken("adm") })
	if got := sendSample(t, base, "GET /metrics", ""); got != http.StatusUnauthorized {
		t.Fatalf("/metrics without the admin token: %d, want 401", got)
	}
	if got := sendSample(t, base, "GET /metrics", "Bearer adm"); got != http.StatusOK {
		t.Fatalf("/metrics with it: %d", got)
	}
	if got := sendSample(t, base, "GET /v1/models", ""); got == http.StatusUnauthorized {
		t.Fatal("without --api-keys the API needs no key")
	}
	_, base = serveProxyWith(t, Config{}, func(d *Deps) { d.AdminToken = adminToken("") })
	if got := sendSample(t, base, "GET /metrics", ""); got != http.StatusOK {
		t.Fatalf("/metrics with no key and no token set: %d, want 200", got)
	}
}

// rawExchange writes head (a request line, headers, and at most the first
// byte of a body) and returns the status line of the answer and the rest of
// the answer's head. The answer must come before the rest of the body is
// sent.
func rawExchange(t *testing.T, base, head string) (status string, header string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	// Generous: the old router waited --body-read-timeout-secs (120 s) for
	// a body that never comes.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(conn)
	status, err = br.ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to the headers alone: %v", err)
	}
	var sb strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil || line == "\r\n" {
			break
		}
		sb.WriteString(line)
	}
	return strings.TrimSpace(status), sb.String()
}

// 401, 413, 429 and 503 are decided on the headers: the client gets them
// while its body is still unsent.
func TestTheDoorAnswersFromTheHeadersBeforeTheBody(t *testing.T) {
	w := startFake(t, "w1")
	cfg := Config{APIKeys: []string{"k1"}, MaxPayloadSize: 64 << 20,
		Admission: admission.Config{Capacity: 1, RefillPerSec: 1e-6, QueueSize: 0},
		Edge:      Edge{MaxBufferedBodyBytes: 64 << 20}}
	_, base := serveProxyWith(t, cfg, nil, w)
	post := func(authz string, length int) string {
		return fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n{",
			authz, length)
	}
	if st, h := rawExchange(t, base, post("", 50<<20)); !strings.Contains(st, " 401 ") || !strings.Contains(h, "Bearer") {
		t.Fatalf("no key: %q %q, want 401 with WWW-Authenticate", st, h)
	}
	if st, _ := rawExchange(t, base, post("Authorization: Bearer k1\r\n", 65<<20)); !strings.Contains(st, " 413 ") {
		t.Fatalf("over the payload limit: %q, want 413", st)
	}
	if got := sendSample(t, base, "POST /v1/completions", "Bearer k1"); got != http.StatusOK {
		t.Fatalf("the request that takes the one admission token: %d", got)
	}
	if st, _ := rawExchange(t, base, post("Authorization: Bearer k1\r\n", 30<<20)); !strings.Contains(st, " 429 ") {
		t.Fatalf("over the admission quota: %q, want 429", st)
	}
	if n := w.Inference.Load(); n != 1 {
		t.Fatalf("the worker was sent %d inference requests, want the one admitted", n)
	}

	// A body that fills the budget (its first MiB sent, it holds its
	// whole length) is held open while the next one arrives: 503 with
	// Retry-After, before its body.
	p, base := serveProxyWith(t, Config{MaxPayloadSize: 64 << 20, Edge: Edge{MaxBufferedBodyBytes: 64 << 20}}, nil, w)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, post("", 64<<20)+`"model":"m","prompt":"`+strings.Repeat("x", bodyintake.CommitBytes)); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return p.door.bodies.Held() == 64<<20 }, "the first body to take its share of the budget")
	if st, h := rawExchange(t, base, post("", 30<<20)); !strings.Contains(st, " 503 ") || !strings.Contains(h, "Retry-After: 1") {
		t.Fatalf("past the budget of bodies held: %q %q, want 503 with Retry-After", st, h)
	}
	conn.Close()
	testwait.Eventually(t, waitDeadline, func() bool { return p.door.bodies.Held() == 0 }, "the abandoned body to give its share back")
	if got := sendSample(t, base, "POST /v1/completions", ""); got != http.StatusOK {
		t.Fatalf("once the budget is free again: %d", got)
	}
}

// A body without a length (chunked) is held to --max-payload-size as it is
// read; one under it is routed whole.
func TestAChunkedBodyIsBoundedAsItIsRead(t *testing.T) {
	w := startFake(t, "w1")
	_, base := serveProxyWith(t, Config{MaxPayloadSize: 1 << 20}, nil, w)
	send := func(body string) (int, string) { return postChunked(t, base, body) }
	if status, body := send(completion("small", false)); status != http.StatusOK {
		t.Fatalf("a small chunked body: %d %s", status, body)
	}
	if got := w.LastBody(); got != completion("small", false) {
		t.Fatalf("the worker got %q", got)
	}
	if status, body := send(completion(strings.Repeat("x", 1<<20), false)); status != http.StatusRequestEntityTooLarge {
		t.Fatalf("a chunked body over the limit: %d %s", status, body)
	}
}

// A request head whose lines end with a bare LF gets a 400 at once, over
// plain HTTP and over TLS, where it used to wait for the header timeout.
func TestARequestWithBareLFLineEndsGetsA400AtOnce(t *testing.T) {
	_, base := serveProxyWith(t, Config{}, nil)
	for _, head := range []string{"GET /health HTTP/1.1\nHost: x\n\n",
		"POST /v1/completions HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}", "GET /health HTTP/1.1\r\nHost: x\n\n"} {
		if st, _ := rawExchange(t, base, head); !strings.Contains(st, " 400 ") {
			t.Errorf("%q: %q, want 400", head, st)
		}
	}
	if st, _ := rawExchange(t, base, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.Contains(st, " 200 ") {
		t.Fatalf("CRLF: %q", st)
	}
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, certPath, keyPath, "lf", x509.NewCertPool())
	_, base = serveProxyWith(t, Config{TLSCertPath: certPath, TLSKeyPath: keyPath}, nil)
	for _, tc := range []struct{ head, want string }{{"GET /health HTTP/1.1\nHost: x\n\n", " 400 "},
		{"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", " 200 "}} {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "http://"), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, tc.head)
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		st, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if !strings.Contains(st, tc.want) {
			t.Errorf("over TLS, %q: %q %v, want%s", tc.head, st, err, tc.want)
		}
	}
}

// postChunked posts a completion body without a length (chunked) and
// returns the answer's status and body.
func postChunked(t *testing.T, base, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", io.MultiReader(strings.NewReader(body)))
	req.ContentLength = -1 // chunked
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
