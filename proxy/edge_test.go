package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// The client edge: what a connection may cost the router, whatever the
// client on the other end does.

func dialRouter(t *testing.T, r *testRouter) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// closedByServer waits until the server closes conn; false if it is still
// open after the deadline.
func closedByServer(conn net.Conn, within time.Duration) bool {
	_ = conn.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func TestSlowlorisAndSilentConnectionsAreClosed(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{Edge: Edge{HeaderReadTimeout: 300 * time.Millisecond}}, w)
	var slow, silent []net.Conn
	for range 20 {
		c := dialRouter(t, r)
		fmt.Fprint(c, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nX-Slow: ")
		slow = append(slow, c)
		silent = append(silent, dialRouter(t, r))
	}
	if resp, _ := post(t, r.url, "/v1/completions", completion("x", false)); resp.StatusCode != 200 {
		t.Fatalf("a normal client got %d while others held connections", resp.StatusCode)
	}
	for i, c := range append(slow, silent...) {
		if !closedByServer(c, 5*time.Second) {
			t.Fatalf("connection %d is still open past the header timeout", i)
		}
	}
	if resp, _ := post(t, r.url, "/v1/completions", completion("y", false)); resp.StatusCode != 200 {
		t.Fatalf("a normal client got %d afterwards", resp.StatusCode)
	}
}

func TestABodyShorterThanItsLengthTimesOut(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{Edge: Edge{BodyReadTimeout: 300 * time.Millisecond}}, w)
	c := dialRouter(t, r)
	fmt.Fprint(c, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: 100\r\n\r\n{\"model\"")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 408 {
		t.Fatalf("%v %v, want 408 once the body stalls", resp, err)
	}
	if w.Inference.Load() != 0 {
		t.Fatal("a request whose body never came reached a worker")
	}
}

func TestAClientThatStopsReadingAStreamIsCutAndItsSlotFreed(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.StreamForever())
	r := startRouter(t, Config{Edge: Edge{WriteTimeout: 300 * time.Millisecond}}, w)
	c := dialRouter(t, r)
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	body := completion("x", true)
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// The client reads nothing: the router's writes block, then time out.
	testwait.Eventually(t, waitDeadline, func() bool { return w.HungUp.Load() == 1 }, "the stream to be cut upstream")
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "the worker slot to be freed")
	w.Set(fakeworker.Default())
	if resp, _ := post(t, r.url, "/v1/completions", completion("y", false)); resp.StatusCode != 200 {
		t.Fatalf("next client got %d", resp.StatusCode)
	}
}

// TestAStreamsDeadlineCutsAClientThatStopsReading: a write that waits on a
// client past --request-timeout-secs is cut then, not at the (here much
// longer) write timeout, and counted as the router's timeout, not as a
// client that left.
func TestAStreamsDeadlineCutsAClientThatStopsReading(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.StreamForever())
	r := startRouter(t, Config{RequestTimeout: 500 * time.Millisecond, Edge: Edge{WriteTimeout: time.Hour}}, w)
	c := dialRouter(t, r)
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	body := completion("x", true)
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	testwait.Eventually(t, waitDeadline, func() bool { return w.HungUp.Load() == 1 }, "the stream to be cut upstream")
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "the worker slot to be freed")
	timedOut := `vllm_router_request_errors_total{route="/v1/completions",status="504",error_type="request_timeout"}`
	testwait.Eventually(t, waitDeadline, func() bool { return metric(t, r, timedOut) == 1 }, "the cut counted as the request's timeout")
	if n := metric(t, r, "vllm_router_client_disconnects_total"); n != 0 {
		t.Fatalf("client disconnects %v: the router's own cut was blamed on the client", n)
	}
}

// TestAReadingClientKeepsAStreamLongerThanTheWriteTimeout: the write
// timeout bounds each write, not the stream.
func TestAReadingClientKeepsAStreamLongerThanTheWriteTimeout(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.StreamPaced(6, 100*time.Millisecond))
	r := startRouter(t, Config{Edge: Edge{WriteTimeout: 250 * time.Millisecond}}, w)
	_, body, err := readStream(t, r.url, completion("x", true))
	if err != nil || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("a 600 ms stream under a 250 ms write timeout: %v %q", err, body)
	}
}

func TestConnectionsPastTheLimitGet503AndTheListenerGoesOn(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{Edge: Edge{MaxConnections: 2}}, w)
	a, b := dialRouter(t, r), dialRouter(t, r)
	for _, c := range []net.Conn{a, b} {
		if status := postOn(t, c, completion("x", false)); status != 200 {
			t.Fatalf("a connection within the limit got %d", status)
		}
	}
	third := dialRouter(t, r)
	if status := postOn(t, third, completion("x", false)); status != 503 {
		t.Fatalf("a connection past the limit got %d, want 503", status)
	}
	a.Close()
	testwait.Eventually(t, waitDeadline, func() bool {
		c := dialRouter(t, r)
		return postOn(t, c, completion("y", false)) == 200
	}, "a new connection to be served")
}

// postOn sends one request on conn (kept alive) and returns the status.
func postOn(t *testing.T, conn net.Conn, body string) int {
	t.Helper()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func TestHeadersOverTheLimitAre431(t *testing.T) {
	r := startRouter(t, Config{Edge: Edge{MaxHeaderSize: 8 << 10}}, startFake(t, "w1"))
	c := dialRouter(t, r)
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nX-Big: %s\r\nContent-Length: 2\r\n\r\n{}", strings.Repeat("b", 16<<10))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 431 {
		t.Fatalf("%v %v, want 431", resp, err)
	}
	b, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(b), "bbbb") {
		t.Fatalf("the error body echoes the request: %s", b)
	}
}

// TestTheListenerRecoversFromRunningOutOfFileDescriptors runs a router in a
// child process under a low RLIMIT_NOFILE, floods it with connections until
// accept fails, and checks that a client on an open connection is served
// throughout and a new one afterwards.
func TestTheListenerRecoversFromRunningOutOfFileDescriptors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	w := startFake(t, "w1")
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), edgeChildEnv+"="+w.URL)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	stdin, _ := child.StdinPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		_ = child.Wait()
	}()
	lines := bufio.NewReader(out)
	addr, err := lines.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	r := &testRouter{url: "http://" + strings.TrimSpace(addr)}
	kept := dialRouter(t, r)
	if status := postOn(t, kept, completion("before", false)); status != 200 {
		t.Fatalf("before the flood: %d", status)
	}
	var flood []net.Conn
	for range 2 * edgeChildFDs {
		c, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
		if err != nil {
			break
		}
		flood = append(flood, c)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return readiness(t, kept) == 503 }, "the child to run out of descriptors")
	if status := postOn(t, kept, completion("during", false)); status != 200 {
		t.Fatalf("an open connection during the flood: %d", status)
	}
	for _, c := range flood {
		c.Close()
	}
	// The child, a -race build, must first read the end of each flood
	// connection it accepted and close it, and its accept loop backs off up
	// to a second between failures: in a full test run on a loaded machine
	// that once took more than waitDeadline.
	took := testwait.Eventually(t, 4*waitDeadline, func() bool { return readiness(t, kept) == 200 }, "the listener to accept again")
	t.Logf("accepting again %v after the flood closed", took)
	if resp, _ := post(t, r.url, "/v1/completions", completion("after", false)); resp.StatusCode != 200 {
		t.Fatalf("a new client after the flood: %d", resp.StatusCode)
	}
}

func readiness(t *testing.T, conn net.Conn) int {
	t.Helper()
	fmt.Fprint(conn, "GET /readiness HTTP/1.1\r\nHost: r\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

const (
	edgeChildEnv = "KVROUTER_EDGE_CHILD_WORKER"
	edgeChildFDs = 64
)

// runEdgeChild is the child of the descriptor test: a router in front of
// the parent's worker, under RLIMIT_NOFILE 64, until its stdin closes.
func runEdgeChild(workerURL string) {
	lim := syscall.Rlimit{Cur: edgeChildFDs, Max: edgeChildFDs}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		os.Exit(2)
	}
	p, err := buildProxy(Config{}, "", "cache_aware", []Worker{{ID: 1, URL: workerURL, Role: RoleRegular}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(ln.Addr().String())
	go func() { _ = p.Serve(ln) }()
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}
