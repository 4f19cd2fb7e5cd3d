package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// peakRSS is the high-water mark of a process's resident memory, in bytes
// (VmHWM of /proc/PID/status).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read the router's memory from: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// sendWhole posts a body of size bytes to addr the way Python's
// http.client does, sending all of it before it looks at the answer, and
// returns the answer's status. The answer is read as it comes, so a router
// that answered early is not stuck behind the unread body.
func sendWhole(addr, authorization string, size int) (int, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	status := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	head := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n",
		addr, authorization, size)
	if _, err := conn.Write([]byte(head)); err != nil {
		return 0, err
	}
	chunk := make([]byte, 1<<20)
	for sent := 0; sent < size; sent += len(chunk) {
		if _, err := conn.Write(chunk[:min(len(chunk), size-sent)]); err != nil {
			break // the router closed once its answer was out: the answer is what counts
		}
	}
	return <-status, nil
}

// Six clients with no key, then six with a key but over the admission
// quota, each sending a body of 150 MB: every one is refused on its
// headers, and the router (a real process; its peak RSS read from /proc)
// stays under 150 MB, where it used to read every body whole first.
func TestRefusedBodiesAreNotReadIntoMemory(t *testing.T) {
	router, _ := binaries(t)
	p := start(t, router, "serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0",
		"--gossip-bind", "127.0.0.1:0", "--data-dir", t.TempDir(), "--node-name", "door", "--api-keys", "k1",
		"--max-concurrent-requests", "1", "--rate-limit-tokens-per-second", "0.0001", "--queue-size", "0")
	addr := p.await(t, `router ready" addr=(\S+)`)
	pid := p.cmd.Process.Pid
	before := peakRSS(t, pid)
	// The bucket's one token, spent: no worker, so 503, but admitted.
	if got, err := sendWhole(addr, "Authorization: Bearer k1\r\n", len(`{}`)); err != nil || got == http.StatusTooManyRequests {
		t.Fatalf("the request that takes the token: %d %v", got, err)
	}
	const clients, size = 6, 150 << 20
	for _, phase := range []struct {
		name, authorization string
		want                int
	}{
		{"no key", "", http.StatusUnauthorized},
		{"a key, over the quota", "Authorization: Bearer k1\r\n", http.StatusTooManyRequests},
	} {
		var wg sync.WaitGroup
		statuses := make([]int, clients)
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i], _ = sendWhole(addr, phase.authorization, size)
			}()
		}
		wg.Wait()
		for i, s := range statuses {
			if s != phase.want {
				t.Errorf("%s: client %d got %d, want %d", phase.name, i, s, phase.want)
			}
		}
	}
	peak := peakRSS(t, pid)
	t.Logf("router peak RSS: %d MiB before, %d MiB after %d x %d MiB refused twice", before>>20, peak>>20, clients, size>>20)
	if peak >= 150<<20 {
		t.Fatalf("the router's peak RSS reached %d MiB: it read refused bodies", peak>>20)
	}
}

// repeated reads n bytes of c.
type repeated struct {
	c byte
	n int
}

func (r *repeated) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = r.c
	}
	r.n -= k
	return k, nil
}

// A chunked body of 300 MB under the default budget (512 MiB) used to be
// read whole into a buffer of 512 MiB, with the 256 MiB one it outgrew
// alongside: the router's peak RSS passed 1 GiB. A body of no length is
// now charged for both buffers while one grows into the other, so it
// grows no further than the budget holds (413, asking for a
// Content-Length), and the router's peak stays within the budget and the
// garbage of the buffers it outgrew.
func TestAChunkedBodyStaysWithinTheBudgetInMemory(t *testing.T) {
	router, _ := binaries(t)
	p := start(t, router, "serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0",
		"--gossip-bind", "127.0.0.1:0", "--data-dir", t.TempDir(), "--node-name", "chunked")
	addr := p.await(t, `router ready" addr=(\S+)`)
	const size, budget = 300 << 20, 512 << 20
	body := io.MultiReader(strings.NewReader(`{"model":"m","prompt":"`), &repeated{'x', size}, strings.NewReader(`"}`))
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/completions", body)
	req.ContentLength = -1
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	peak := peakRSS(t, p.cmd.Process.Pid)
	t.Logf("a chunked body of %d MiB: %d %s; the router's peak RSS %d MiB", size>>20, resp.StatusCode, answer, peak>>20)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(answer), "Content-Length") {
		t.Errorf("the chunked body: %d %s, want 413 asking for a Content-Length", resp.StatusCode, answer)
	}
	if peak > budget+budget/4 {
		t.Fatalf("the router's peak RSS reached %d MiB, past the budget of %d MiB and a quarter of it", peak>>20, budget>>20)
	}
}

// The slow body of the security review, on a real router with the
// default limits: Content-Length: 536870912, then a byte every 100 ms. It
// used to reserve the whole budget, and every other request got 503 for
// up to 120 s. Now the others are served while it trickles, and past its
// grace (2 s here) it is cut with a 408 naming --min-body-rate.
func TestASlowBodyTurnsAwayNoneOfTheOthers(t *testing.T) {
	router, workersim := binaries(t)
	_, w := startWorkersim(t, workersim, "w0")
	base := startRouterProcess(t, router, "--worker-urls", w, "--body-rate-grace-secs", "2")
	addr := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: 536870912\r\n\r\n")
	answered := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	sent, refused := 0, 0
	for slow := ""; slow == ""; {
		select {
		case slow = <-answered:
			if !strings.HasPrefix(slow, "408 ") || !strings.Contains(slow, "--min-body-rate") {
				t.Fatalf("the slow body: %s, want 408 naming --min-body-rate", slow)
			}
		case <-tick.C:
			_, _ = conn.Write([]byte("{"))
			status := complete(t, base, fmt.Sprintf("while a body trickles %d", sent), false).status
			sent++
			if status != http.StatusOK {
				refused++
			}
		}
	}
	t.Logf("while the slow body trickled, %d of %d other requests were turned away", refused, sent)
	if sent < 5 || refused > 2 {
		t.Fatalf("the slow body turned away %d of the %d other requests", refused, sent)
	}
}
