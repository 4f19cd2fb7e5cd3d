package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
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
