package link

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Kinds of link a connection to the cluster port carries, announced by its
// first byte (sent inside TLS when the cluster has TLS).
const (
	KindRaft byte = 'R' // hashicorp/raft's RPCs
	KindRPC  byte = 'H' // HTTP between replicas: forwarded writes, keyring changes
)

// Limits of the cluster port against peers that connect and say nothing.
const (
	// linkHandshakeTimeout bounds the TLS handshake and the link byte: as
	// long as Raft's transport gives one RPC's network I/O.
	linkHandshakeTimeout = 3 * time.Second
	// maxPendingLinks bounds the connections in their handshake at once,
	// and maxPendingPerHost those from one address, so that a stranger
	// holding connections open without a word cannot crowd out the peers;
	// beyond either, new connections are closed at once.
	maxPendingLinks   = 1024
	maxPendingPerHost = 16
	// connectTimeout bounds the TCP connect of a dial to a peer (the TLS
	// handshake and the link byte have the rest of the dial's bound).
	connectTimeout = time.Second
)

// ErrPortClosed is what the cluster port's listeners return once closed. It
// wraps net.ErrClosed, which is how servers (fasthttp's included) tell a
// listener closed on purpose from a failing one.
var ErrPortClosed = fmt.Errorf("cluster port: %w", net.ErrClosed)

// Port is the listener on --raft-bind that carries every link
// between replicas: Raft and the replicas' HTTP (forwarded writes, keyring
// changes). With cluster TLS, a connection must complete a mutual TLS
// handshake with a certificate the cluster CA signed before a single byte
// of it reaches Raft or the HTTP handler; without it, links are plain TCP
// and only loopback or --insecure-cluster allow that (the wiring checks).
//
// One goroutine accepts; each new connection does its handshake on its
// own goroutine, bounded by linkHandshakeTimeout, maxPendingLinks and
// maxPendingPerHost, so a stranger that never finishes one holds up no
// peer. Close ends them all.
type Port struct {
	ln        net.Listener
	advertise net.Addr // nil: the bound address
	tls       *TLS
	log       *slog.Logger

	raftConns, rpcConns chan net.Conn
	done                chan struct{}
	closeOnce           sync.Once
	// unheld ends every held dial (see raftLayer.Dial): Raft waits for its
	// replication goroutines before it closes the transport.
	unheld     chan struct{}
	unheldOnce sync.Once
	wg         sync.WaitGroup

	mu      sync.Mutex
	pending map[net.Conn]struct{} // in their handshake; closed by Close
	perHost map[string]int        // pending connections by remote IP
	// maxPending and maxPerHost are maxPendingLinks and maxPendingPerHost
	// (tests lower them).
	maxPending, maxPerHost int

	refused      atomic.Uint64
	lastRefusalW atomic.Int64 // unix nanos of the last refusal logged at WARN
	redials      atomic.Int64 // tries of held raft dials and RPCs after a first failed one
}

func Open(bind string, advertise net.Addr, t *TLS, log *slog.Logger) (*Port, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	p := &Port{ln: ln, advertise: advertise, tls: t, log: log,
		raftConns: make(chan net.Conn), rpcConns: make(chan net.Conn), done: make(chan struct{}), unheld: make(chan struct{}),
		pending: map[net.Conn]struct{}{}, perHost: map[string]int{},
		maxPending: maxPendingLinks, maxPerHost: maxPendingPerHost}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address peers dial: the advertised one, else the bound one.
func (p *Port) Addr() net.Addr {
	if p.advertise != nil {
		return p.advertise
	}
	return p.ln.Addr()
}

// ListenAddr is the address the port is bound to, which differs from Addr
// behind a NAT or a proxy.
func (p *Port) ListenAddr() net.Addr { return p.ln.Addr() }

// StopHolding ends the held dials and makes later ones fail at once, for a
// Raft that is shutting down. Safe to call more than once.
func (p *Port) StopHolding() { p.unheldOnce.Do(func() { close(p.unheld) }) }

// TLS is the port's mutual TLS, nil when the cluster runs without.
func (p *Port) TLS() *TLS { return p.tls }

// RaftLayer is the port as Raft's stream layer: the connections of kind
// KindRaft, and dials that announce it.
func (p *Port) RaftLayer() raft.StreamLayer { return raftLayer{p} }

// SetPendingLimits lowers maxPendingLinks and maxPendingPerHost, for tests
// that fill them.
func (p *Port) SetPendingLimits(total, perHost int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.maxPending, p.maxPerHost = total, perHost
}

// Redials counts the tries of held Raft dials and RPCs after a first
// failed one.
func (p *Port) Redials() int64 { return p.redials.Load() }

// Refused counts connections dropped before they were admitted: failed
// handshakes, unknown link bytes, too many pending.
func (p *Port) Refused() uint64 { return p.refused.Load() }

// Close stops accepting, closes the connections in their handshake and
// waits for the port's goroutines. Admitted connections belong to Raft or
// the HTTP server, which close their own. Safe to call more than once.
func (p *Port) Close() error {
	var err error
	p.closeOnce.Do(func() {
		close(p.done)
		err = p.ln.Close()
		p.mu.Lock()
		for c := range p.pending {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return err
}

func (p *Port) acceptLoop() {
	defer p.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.done:
				return
			case <-time.After(backoff):
			}
			// Out of descriptors, say: keep trying, do not die.
			p.log.Error("cluster port: accept failed; retrying", "err", err, "in", backoff)
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		p.admit(conn)
	}
}

// admit starts conn's handshake, or closes it when too many are pending.
func (p *Port) admit(conn net.Conn) {
	host := remoteHost(conn)
	if err := p.hold(conn, host); err != nil {
		p.refuse(conn, err)
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		link, kind, err := p.handshake(conn)
		p.release(conn, host)
		if err != nil {
			p.refuse(conn, err)
			return
		}
		p.deliver(link, kind)
	}()
}

// hold counts conn as pending, unless that would pass a limit.
func (p *Port) hold(conn net.Conn, host string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case len(p.pending) >= p.maxPending:
		return errors.New("too many connections in their handshake")
	case p.perHost[host] >= p.maxPerHost:
		return fmt.Errorf("too many connections from %s in their handshake", host)
	}
	p.pending[conn] = struct{}{}
	p.perHost[host]++
	return nil
}

func (p *Port) release(conn net.Conn, host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, conn)
	if p.perHost[host]--; p.perHost[host] <= 0 {
		delete(p.perHost, host)
	}
}

// remoteHost is the IP a connection comes from.
func remoteHost(conn net.Conn) string {
	host, _, err := net.SplitHostPort(conn.RemoteAddr().String())
	if err != nil {
		return conn.RemoteAddr().String()
	}
	return host
}

// handshake runs the TLS handshake, if any, and reads the link byte.
func (p *Port) handshake(conn net.Conn) (net.Conn, byte, error) {
	_ = conn.SetDeadline(time.Now().Add(linkHandshakeTimeout))
	link := conn
	if p.tls != nil {
		tc := tls.Server(conn, p.tls.ServerConfig())
		if err := tc.Handshake(); err != nil {
			return nil, 0, fmt.Errorf("tls handshake: %w", err)
		}
		link = tc
	}
	var kind [1]byte
	if _, err := io.ReadFull(link, kind[:]); err != nil {
		return nil, 0, fmt.Errorf("reading the link kind: %w", err)
	}
	if kind[0] != KindRaft && kind[0] != KindRPC {
		return nil, 0, fmt.Errorf("unknown link kind %#x (a peer of another version, or not a replica)", kind[0])
	}
	_ = conn.SetDeadline(time.Time{})
	return link, kind[0], nil
}

// deliver hands an admitted connection to Raft or to the HTTP server.
func (p *Port) deliver(conn net.Conn, kind byte) {
	ch := p.raftConns
	if kind == KindRPC {
		ch = p.rpcConns
	}
	select {
	case ch <- conn:
	case <-p.done:
		_ = conn.Close()
	}
}

// refuse closes a connection that was not admitted, counts it and says so
// now and then: a stranger knocking is worth a line, not a line a packet.
func (p *Port) refuse(conn net.Conn, why error) {
	p.refused.Add(1)
	remote := conn.RemoteAddr().String()
	_ = conn.Close()
	now := time.Now().UnixNano()
	if last := p.lastRefusalW.Load(); now-last > int64(10*time.Second) && p.lastRefusalW.CompareAndSwap(last, now) {
		p.log.Warn("cluster port: refused a connection (counted in vllm_router_cluster_link_refusals_total)",
			"remote", remote, "err", why)
		return
	}
	p.log.Debug("cluster port: refused a connection", "remote", remote, "err", why)
}

// dial opens a link of kind to the cluster port at addr: TCP, the TLS
// handshake (when the cluster has TLS) and the link byte, all bounded by
// ctx.
func (p *Port) Dial(ctx context.Context, addr string, kind byte) (net.Conn, error) {
	// A peer's kernel answers a SYN in milliseconds; one that was dropped
	// is sent again only after a second, so a try of a held dial is cut
	// there and the next one sends a fresh SYN.
	d := net.Dialer{Timeout: connectTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	link := conn
	if p.tls != nil {
		tc := tls.Client(conn, p.tls.ClientConfig())
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("cluster tls handshake with %s: %w", addr, err)
		}
		link = tc
	}
	if _, err := link.Write([]byte{kind}); err != nil {
		_ = link.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return link, nil
}

// acceptFrom returns the next admitted connection of ch, or ErrPortClosed.
func (p *Port) acceptFrom(ch chan net.Conn) (net.Conn, error) {
	select {
	case c := <-ch:
		return c, nil
	case <-p.done:
		return nil, ErrPortClosed
	}
}

// raftLayer is the cluster port as Raft's stream layer. Raft closes it at
// shutdown, which closes the whole port.
type raftLayer struct{ p *Port }

var _ raft.StreamLayer = raftLayer{}

func (l raftLayer) Accept() (net.Conn, error) { return l.p.acceptFrom(l.p.raftConns) }
func (l raftLayer) Close() error              { return l.p.Close() }
func (l raftLayer) Addr() net.Addr            { return l.p.Addr() }

// Raft's dials to a peer it cannot reach hold and try again, rather than
// fail at once. hashicorp/raft sleeps after every failed RPC to a
// follower, doubling up to ~10 s, in a sleep nothing wakes: a follower cut
// off for a few seconds, its RPCs failing as fast as the network refuses
// them, stayed stale for up to 10 s after the network healed. A dial that
// holds costs Raft one failure per maxDialHold instead, its backoff stays
// at a few milliseconds, and the follower is reached within a redial of
// the network healing. The RPCs themselves hold the same way (Hold;
// raftnode's transport), for a network that takes the connection and then
// resets it or swallows what is sent.
const (
	// redialEvery is the pause between two tries of a held dial.
	redialEvery = 250 * time.Millisecond
	// maxDialHold bounds a held dial. A peer away longer than the reap
	// timeout (30 s) is removed and, back, replicated to afresh anyway.
	maxDialHold = 30 * time.Second
)

// Hold runs try until it succeeds, redialEvery apart, for up to
// maxDialHold, and returns its last error; it gives up at once when the
// port closes (ErrPortClosed) or StopHolding is called. Each try after the
// first counts in Redials.
func (p *Port) Hold(try func() error) error {
	giveUp := time.Now().Add(maxDialHold)
	for {
		err := try()
		if err == nil || !time.Now().Add(redialEvery).Before(giveUp) || p.holdingStopped() {
			return err
		}
		select {
		case <-p.done:
			return ErrPortClosed
		case <-p.unheld:
			return err
		case <-time.After(redialEvery):
		}
		p.redials.Add(1)
	}
}

// Dial connects to a peer's cluster port for Raft, each try bounded by
// timeout, holding and trying again every redialEvery while the peer
// cannot be reached, for up to maxDialHold or until the port closes.
func (l raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	var conn net.Conn
	err := l.p.Hold(func() (err error) {
		conn, err = l.dialOnce(addr, timeout)
		return err
	})
	return conn, err
}

func (p *Port) holdingStopped() bool {
	select {
	case <-p.unheld:
		return true
	default:
		return false
	}
}

func (l raftLayer) dialOnce(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.p.Dial(ctx, string(addr), KindRaft)
}

// rpcListener is the cluster port as the replicas' HTTP server's listener.
// Closing it does not close the port (Raft owns that).
type rpcListener struct {
	p      *Port
	closed chan struct{}
	once   sync.Once
}

func (p *Port) RPCListener() *rpcListener {
	return &rpcListener{p: p, closed: make(chan struct{})}
}

func (l *rpcListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.p.rpcConns:
		return c, nil
	case <-l.p.done:
	case <-l.closed:
	}
	return nil, ErrPortClosed
}

func (l *rpcListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *rpcListener) Addr() net.Addr { return l.p.Addr() }
