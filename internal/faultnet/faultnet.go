// Package faultnet is a TCP proxy that tests put in front of a listener to
// cut it off the network the ways a network fails: nothing listening
// (connections refused), every connection reset, or a black hole, where
// packets vanish and nobody is told: connections stay open and silent, new
// ones never get an answer, and what was sent before the heal arrives after
// it, as TCP's retransmissions deliver it. A black hole is the failure that
// timeouts alone find, and the one a refused dial does not exercise.
//
// It runs in the test's process over real loopback sockets, so it needs no
// privileges; where a test can create network namespaces, iptables DROP is
// the real thing (chaos/ has a scenario that does).
package faultnet

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Mode is how the proxy treats traffic.
type Mode int

// The modes. Pass forwards; the others are faults.
const (
	// Pass forwards every byte both ways.
	Pass Mode = iota
	// Drop is a black hole: no byte goes either way, established
	// connections stay open, new ones are accepted by the kernel and then
	// hear nothing. Bytes held back go out once healed, unless an end
	// gave up on its connection by then.
	Drop
	// Reset resets every connection, established or new.
	Reset
	// Refuse closes the listener, so connections are refused, and resets
	// the established ones, as a host whose process died answers.
	Refuse
)

func (m Mode) String() string {
	return [...]string{"pass", "drop", "reset", "refuse"}[m]
}

// Proxy forwards the connections made to Addr to its upstream. Safe for
// concurrent use. Close (or the test's end) stops it and its goroutines.
type Proxy struct {
	addr string

	mu       sync.Mutex
	ln       net.Listener // nil while refusing
	upstream string
	// upstreamSet is closed once an upstream is known: connections that
	// arrive before wait for it.
	upstreamSet chan struct{}
	mode        Mode
	// healed is closed when the mode returns to Pass; a forwarding
	// goroutine in a black hole waits on it.
	healed chan struct{}
	conns  map[*link]struct{}
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

// link is one proxied connection: the client's side and the upstream's.
type link struct{ client, upstream net.Conn }

// Start listens on a free loopback port and forwards to upstream, which may
// be empty and given later with SetUpstream (for a server that must be told
// the proxy's address before it binds). The proxy stops when the test ends.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultnet: %v", err)
	}
	p := &Proxy{addr: ln.Addr().String(), ln: ln, upstreamSet: make(chan struct{}),
		healed: make(chan struct{}), conns: map[*link]struct{}{}, done: make(chan struct{})}
	close(p.healed)
	if upstream != "" {
		p.SetUpstream(upstream)
	}
	p.serve(ln)
	t.Cleanup(p.Close)
	return p
}

// Addr is where clients connect: give it out in place of the upstream's.
func (p *Proxy) Addr() string { return p.addr }

// SetUpstream sets where connections go, once.
func (p *Proxy) SetUpstream(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.upstream == "" {
		p.upstream = addr
		close(p.upstreamSet)
	}
}

// Cut starts a fault of mode m (Drop, Reset or Refuse) until Heal.
func (p *Proxy) Cut(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || m == Pass {
		return
	}
	if p.mode == Pass {
		p.healed = make(chan struct{})
	}
	p.mode = m
	if m == Reset || m == Refuse {
		for l := range p.conns {
			l.reset()
			delete(p.conns, l)
		}
	}
	if m == Refuse && p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
}

// Heal ends the fault: connections pass again, held bytes go out, and a
// refusing proxy listens again on its address.
func (p *Proxy) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == Pass {
		return nil
	}
	p.mode = Pass
	close(p.healed)
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.ln = ln
	p.serve(ln)
	return nil
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	if p.ln != nil {
		_ = p.ln.Close()
	}
	for l := range p.conns {
		l.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// serve accepts on ln until it closes.
func (p *Proxy) serve(ln net.Listener) {
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.handle(c) })
		}
	})
}

// handle proxies one accepted connection, or resets it in Reset mode.
func (p *Proxy) handle(c net.Conn) {
	select {
	case <-p.upstreamSet:
	case <-p.done:
		_ = c.Close()
		return
	}
	p.mu.Lock()
	mode, upstream := p.mode, p.upstream
	p.mu.Unlock()
	if mode == Reset || mode == Refuse {
		(&link{client: c}).reset()
		return
	}
	// In a black hole the client's handshake gets no answer: nothing
	// reaches the upstream, nor its verdict on a silent connection, until
	// the heal.
	if !p.waitPass() {
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", upstream)
	if err != nil {
		(&link{client: c}).reset() // as the upstream's kernel would
		return
	}
	l := &link{client: c, upstream: up}
	if !p.track(l) {
		l.close()
		return
	}
	var both sync.WaitGroup
	both.Go(func() { p.pump(l, l.upstream, l.client) })
	both.Go(func() { p.pump(l, l.client, l.upstream) })
	both.Wait()
	p.untrack(l)
}

func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.mode == Reset || p.mode == Refuse {
		// The fault began while this connection was being made: it is
		// reset as the established ones were.
		l.reset()
		return false
	}
	p.conns[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, l)
}

// pump copies src to dst, holding each read back while the proxy is a
// black hole (so the sender's buffers fill, as when no segment is
// acknowledged), until either side ends; then it closes both, once the
// hole (which swallows a FIN or a reset too) has healed.
func (p *Proxy) pump(l *link, dst, src net.Conn) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.waitPass() {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				l.reset()
			}
			return
		}
	}
}

// waitPass waits while the proxy drops traffic; false once it is closed.
func (p *Proxy) waitPass() bool {
	p.mu.Lock()
	healed := p.healed
	p.mu.Unlock()
	select {
	case <-healed:
		return true
	case <-p.done:
		return false
	}
}

// reset closes both sides with a TCP reset rather than a FIN.
func (l *link) reset() {
	for _, c := range []net.Conn{l.client, l.upstream} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	l.close()
}

func (l *link) close() {
	for _, c := range []net.Conn{l.client, l.upstream} {
		if c != nil {
			_ = c.Close()
		}
	}
}
