package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/proxy/bodyintake"
)

// openBody opens a connection from the local address from (127.0.0.1 when
// empty) and sends the head of a completion announcing length bytes, with
// key's bearer when key is set.
func openBody(t *testing.T, base, from, key string, length int) (net.Conn, *bufio.Reader) {
	t.Helper()
	d := net.Dialer{}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	conn, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	auth := ""
	if key != "" {
		auth = "Authorization: Bearer " + key + "\r\n"
	}
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n", auth, length)
	return conn, bufio.NewReader(conn)
}

// answerOf reads the status of the answer on br, within a deadline.
func answerOf(t *testing.T, conn net.Conn, br *bufio.Reader) (int, string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sendFrom posts a small completion from the local address from, with
// key's bearer when set, and returns the status.
func sendFrom(t *testing.T, base, from, key string) int {
	t.Helper()
	body := completion("hello", false)
	conn, br := openBody(t, base, from, key, len(body))
	if _, err := io.WriteString(conn, body); err != nil {
		t.Fatal(err)
	}
	status, _ := answerOf(t, conn, br)
	conn.Close()
	return status
}

// The slow body of the security review: Content-Length of the whole
// budget, then a byte every 20 ms. It used to reserve the whole budget on
// its headers, and every other request got 503 for as long as the body
// timeout allowed. Now it holds what arrived (16 KiB), every other request
// is served, and past the grace it is cut with a 408 that says why, its
// connection closed and its share given back.
func TestASlowBodyHoldsWhatArrivedAndIsCut(t *testing.T) {
	w := startFake(t, "w1")
	cfg := Config{MaxPayloadSize: 16 << 20, Edge: Edge{MaxBufferedBodyBytes: 16 << 20, BodyReadTimeout: 5 * time.Second,
		MinBodyRate: 1 << 10, BodyRateGrace: 500 * time.Millisecond}}
	p, base := serveProxyWith(t, cfg, nil, w)
	conn, br := openBody(t, base, "", "", 16<<20)
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for _, c := range `{"model":"m","prompt":"` + strings.Repeat("x", 1000) {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{byte(c)}); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-trickled }()
	testwait.Eventually(t, waitDeadline, func() bool { return p.door.bodies.Held() > 0 }, "the slow body to be read")
	const others = 20
	refused := 0
	for range others {
		if sendFrom(t, base, "", "") != http.StatusOK {
			refused++
		}
	}
	t.Logf("while the slow body was read, %d of %d other requests were turned away; it held %d bytes", refused, others,
		p.door.bodies.Held())
	if refused > 0 {
		t.Fatalf("the slow body turned away %d of %d other requests", refused, others)
	}
	status, body := answerOf(t, conn, br)
	if status != http.StatusRequestTimeout || !strings.Contains(body, "--min-body-rate") {
		t.Fatalf("the slow body: %d %s, want 408 naming --min-body-rate", status, body)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return p.door.bodies.Held() == 0 }, "the slow body's share to be given back")
}

// One client (a key; without keys an address) uses the budget others
// leave, but keeps no more than its share while another needs room: the
// largest body it is still sending is cut (503), and the other client is
// served. The same client, over its share, gets no more.
func TestAClientKeepsNoMoreThanItsShareWhileOthersNeedRoom(t *testing.T) {
	for _, tc := range []struct {
		name               string
		keys               []string
		hog, other         [2]string // local address and key
		hogAgain           [2]string
		wantHogAgainStatus int
	}{
		{"keys", []string{"k1", "k2"}, [2]string{"", "k1"}, [2]string{"", "k2"}, [2]string{"", "k1"}, http.StatusServiceUnavailable},
		{"addresses", nil, [2]string{"127.0.0.1", ""}, [2]string{"127.0.0.2", ""}, [2]string{"127.0.0.1", ""}, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := startFake(t, "w1")
			cfg := Config{APIKeys: tc.keys, MaxPayloadSize: 8 << 20, Edge: Edge{MaxBufferedBodyBytes: 8 << 20, MaxBodyShare: 0.5}}
			p, base := serveProxyWith(t, cfg, nil, w)
			hog, hogBr := openBody(t, base, tc.hog[0], tc.hog[1], 8<<20)
			if _, err := io.WriteString(hog, `{"model":"m","prompt":"`+strings.Repeat("x", bodyintake.CommitBytes)); err != nil {
				t.Fatal(err)
			}
			testwait.Eventually(t, waitDeadline, func() bool { return p.door.bodies.Held() == 8<<20 },
				"the hog's body to hold the whole budget, nobody else needing it")
			if got := sendFrom(t, base, tc.hogAgain[0], tc.hogAgain[1]); got != tc.wantHogAgainStatus {
				t.Fatalf("the hog's second request: %d, want %d: it is over its share", got, tc.wantHogAgainStatus)
			}
			if got := sendFrom(t, base, tc.other[0], tc.other[1]); got != http.StatusOK {
				t.Fatalf("another client's request while the hog holds the budget: %d, want 200", got)
			}
			status, body := answerOf(t, hog, hogBr)
			if status != http.StatusServiceUnavailable || !strings.Contains(body, "--max-body-share") {
				t.Fatalf("the hog's body: %d %s, want 503 naming --max-body-share", status, body)
			}
		})
	}
}

// A body of no length (chunked) is charged to admission for what it turns
// out to be: its tenant's tokens in flight are its length's, not the least
// a request costs.
func TestAChunkedBodyCostsAdmissionWhatItTurnsOutToBe(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Hold())
	r := startRouter(t, Config{}, w)
	body := completion(strings.Repeat("x", 400_000), false)
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/completions", io.MultiReader(strings.NewReader(body)))
		req.ContentLength = -1
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	testwait.Eventually(t, waitDeadline, func() bool { return w.Inference.Load() == 1 }, "the chunked request at the worker")
	tenants := r.proxy.AdmissionStats().Tenants
	want := core.Cost(len(body))
	if len(tenants) != 1 || tenants[0].Tokens != want {
		t.Fatalf("admission charges the chunked request %+v, want %d tokens", tenants, want)
	}
	w.Open()
	if s := <-done; s != http.StatusOK {
		t.Fatalf("the chunked request: %d", s)
	}
}

// A body of no length grows by doubling, and its old buffer is charged
// until it is copied: the budget bounds its memory, so one that would need
// more than the budget to grow once more is a 413 that says to send a
// Content-Length, where it used to be read whole at half again the
// budget's memory. One that fits is routed whole.
func TestAChunkedBodyStaysWithinTheBudget(t *testing.T) {
	w := startFake(t, "w1")
	cfg := Config{MaxPayloadSize: 4 << 20, Edge: Edge{MaxBufferedBodyBytes: 4 << 20, MaxBodyShare: 1}}
	p, base := serveProxyWith(t, cfg, nil, w)
	send := func(body string) (int, string) { return postChunked(t, base, body) }
	if status, body := send(completion(strings.Repeat("x", 3<<20), false)); status != http.StatusRequestEntityTooLarge ||
		!strings.Contains(body, "Content-Length") {
		t.Fatalf("a chunked body that cannot grow within the budget: %d %s, want 413", status, body)
	}
	if status, body := send(completion(strings.Repeat("x", 1<<20), false)); status != http.StatusOK {
		t.Fatalf("a chunked body that fits: %d %s", status, body)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return p.door.bodies.Held() == 0 }, "the budget to be given back")
}
