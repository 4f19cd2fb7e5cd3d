package zmtp

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"
)

// ListenConfig is how a SubListener takes the publishers that dial it.
type ListenConfig struct {
	Limits Limits
	// Admit is asked about each connection's remote address before a byte
	// is read from it; an error closes the connection unread. Required.
	Admit func(remote netip.AddrPort) error
	// MaxConns bounds the connections held at once, in their handshake or
	// after (default 1024); past it a new one is closed unread.
	MaxConns int
	// MaxPerHost bounds those of one remote address (default 16: an engine
	// with data-parallel ranks opens one a rank).
	MaxPerHost int
	// Serve hears one publisher after its handshake, on a goroutine of its
	// own; when it returns the connection is closed. Required.
	Serve func(c *Conn)
	// Refused, when set, hears every connection refused and why.
	Refused func(remote net.Addr, err error)
}

// Errors a refused connection is reported with.
var (
	ErrTooManyConns = errors.New("zmtp: too many connections")
	ErrTooManyHost  = errors.New("zmtp: too many connections from one host")
)

// SubListener is a SUB socket bound to an address that publishers dial: it
// accepts each, shakes hands with it within the handshake timeout (many at
// once, so a silent peer holds up no other) and subscribes to every topic.
type SubListener struct {
	ln  net.Listener
	cfg ListenConfig

	mu     sync.Mutex
	conns  map[net.Conn]netip.Addr
	byHost map[netip.Addr]int
	closed bool
	wg     sync.WaitGroup
}

// ListenSub starts taking publishers on ln; Close stops it.
func ListenSub(ln net.Listener, cfg ListenConfig) *SubListener {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1024
	}
	if cfg.MaxPerHost <= 0 {
		cfg.MaxPerHost = 16
	}
	cfg.Limits = cfg.Limits.withDefaults()
	l := &SubListener{ln: ln, cfg: cfg, conns: map[net.Conn]netip.Addr{}, byHost: map[netip.Addr]int{}}
	l.wg.Add(1)
	go l.accept()
	return l
}

// Addr is the address publishers dial.
func (l *SubListener) Addr() net.Addr { return l.ln.Addr() }

// Close stops accepting, closes every connection and waits for their
// goroutines, Serve's included.
func (l *SubListener) Close() {
	l.mu.Lock()
	l.closed = true
	for nc := range l.conns {
		nc.Close()
	}
	l.mu.Unlock()
	l.ln.Close()
	l.wg.Wait()
}

func (l *SubListener) accept() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.isClosed() {
				return
			}
			// Out of descriptors, say: wait rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if err := l.take(nc); err != nil {
			l.refuse(nc, err)
			continue
		}
		l.wg.Add(1)
		go l.serve(nc)
	}
}

// take admits nc and counts it, or says why not.
func (l *SubListener) take(nc net.Conn) error {
	remote := addrPort(nc.RemoteAddr())
	if err := l.cfg.Admit(remote); err != nil {
		return err
	}
	host := remote.Addr().Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return net.ErrClosed
	case len(l.conns) >= l.cfg.MaxConns:
		return ErrTooManyConns
	case l.byHost[host] >= l.cfg.MaxPerHost:
		return ErrTooManyHost
	}
	l.conns[nc] = host
	l.byHost[host]++
	return nil
}

func (l *SubListener) refuse(nc net.Conn, err error) {
	if l.cfg.Refused != nil {
		l.cfg.Refused(nc.RemoteAddr(), err)
	}
	nc.Close()
}

func (l *SubListener) serve(nc net.Conn) {
	defer l.wg.Done()
	defer l.drop(nc)
	c, err := Handshake(nc, "SUB", pubPeers, l.cfg.Limits)
	if err == nil {
		err = c.Send(subscribeAll)
	}
	if err != nil {
		l.refuse(nc, err)
		return
	}
	l.cfg.Serve(c)
}

func (l *SubListener) drop(nc net.Conn) {
	nc.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if host, ok := l.conns[nc]; ok {
		delete(l.conns, nc)
		if l.byHost[host]--; l.byHost[host] == 0 {
			delete(l.byHost, host)
		}
	}
}

func (l *SubListener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// addrPort is a connection's remote address as a netip.AddrPort (the zero
// one for a non-IP address).
func addrPort(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
