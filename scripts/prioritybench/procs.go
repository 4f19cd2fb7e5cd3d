package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// fleet is the processes of one run: workersims and router replicas on
// 127.0.0.1, each logging into dir.
type fleet struct {
	dir     string
	procs   []*exec.Cmd
	workers []string // worker base URLs
	routers []string // replica API URLs
}

// freePorts returns n loopback ports free for TCP and UDP a moment ago.
func freePorts(n int) []int {
	var out []int
	var held []net.Listener
	var heldU []net.PacketConn
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			l.Close()
			continue
		}
		held, heldU = append(held, l), append(heldU, u)
		out = append(out, port)
	}
	for i := range held {
		held[i].Close()
		heldU[i].Close()
	}
	return out
}

func (f *fleet) start(name string, bin string, args ...string) {
	cmd := exec.Command(bin, args...)
	log, err := os.Create(filepath.Join(f.dir, name+".log"))
	if err != nil {
		panic(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	f.procs = append(f.procs, cmd)
}

// startWorkers starts n workersims running at most seqs sequences each,
// each with extra flags.
func (f *fleet) startWorkers(n, seqs int, timeScale float64, extra ...string) {
	for i, port := range freePorts(n) {
		args := []string{"--host", "127.0.0.1", "--port", fmt.Sprint(port),
			"--worker-id", fmt.Sprintf("w%d", i), "--model", "sim-model", "--max-num-seqs", fmt.Sprint(seqs),
			"--time-scale", fmt.Sprint(timeScale)}
		f.start(fmt.Sprintf("workersim-%d", i), "bin/workersim", append(args, extra...)...)
		f.workers = append(f.workers, fmt.Sprintf("http://127.0.0.1:%d", port))
	}
	for _, u := range f.workers {
		waitOK(u + "/health")
	}
}

// startRouters starts a tier of n replicas in front of the workers, each
// with extra flags.
func (f *fleet) startRouters(n int, extra ...string) {
	ports := freePorts(3 * n)
	for i := range n {
		api, gossip, raft := ports[3*i], ports[3*i+1], ports[3*i+2]
		args := []string{"serve", "--host", "127.0.0.1", "--port", fmt.Sprint(api), "--prometheus-port", "0",
			"--node-name", fmt.Sprintf("bench-%d", i), "--data-dir", filepath.Join(f.dir, fmt.Sprintf("data-%d", i)),
			"--gossip-bind", fmt.Sprintf("127.0.0.1:%d", gossip), "--raft-bind", fmt.Sprintf("127.0.0.1:%d", raft),
			"--bootstrap-expect", fmt.Sprint(n), "--worker-urls", strings.Join(f.workers, ","), "--log-level", "warning"}
		if i > 0 {
			args = append(args, "--join", fmt.Sprintf("127.0.0.1:%d", ports[1]))
		}
		f.start(fmt.Sprintf("router-%d", i), "bin/router", append(args, extra...)...)
		f.routers = append(f.routers, fmt.Sprintf("http://127.0.0.1:%d", api))
	}
	for _, u := range f.routers {
		waitOK(u + "/readiness")
	}
}

func (f *fleet) stop() {
	for _, c := range f.procs {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range f.procs {
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
	f.procs = nil
	_ = os.RemoveAll(f.dir)
}

func waitOK(url string) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	panic("never ready: " + url)
}

// gauge reads the sum of a metric family's samples whose line contains
// every one of match from a /metrics page.
func gauge(url, family string, match ...string) float64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, family) || len(line) > len(family) && line[len(family)] != '{' && line[len(family)] != ' ' {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(line, m)
		}
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}
