// Package tcpforward is a load balancer for tests: a loopback listener
// whose connections are forwarded to one target at a time, which a test
// moves (To) as a Service would move to another pod, cutting the
// connections made before.
package tcpforward

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Forwarder forwards each connection it accepts to its current target.
type Forwarder struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
	wg     sync.WaitGroup
}

// New listens on loopback and forwards to target (host:port) until the
// test ends.
func New(t testing.TB, target string) *Forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Forwarder{ln: ln, target: target}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.Close)
	return f
}

// Addr is where clients connect.
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

// To sends new connections to target and cuts those made before.
func (f *Forwarder) To(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.target = target
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// Close stops accepting, cuts every connection and waits for the copies.
func (f *Forwarder) Close() {
	f.ln.Close()
	f.mu.Lock()
	target := f.target
	f.mu.Unlock()
	f.To(target)
	f.wg.Wait()
}

func (f *Forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		up, err := net.Dial("tcp", f.target)
		if err != nil {
			f.mu.Unlock()
			c.Close()
			continue
		}
		f.conns = append(f.conns, c, up)
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(up, c)
		go f.pipe(c, up)
	}
}

func (f *Forwarder) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}
