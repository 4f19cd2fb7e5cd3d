package zmtp

import (
	"context"
	"net"
)

// The socket types this package speaks, and the peers each accepts.
var (
	pubPeers    = []string{"PUB", "XPUB"}
	subPeers    = []string{"SUB", "XSUB"}
	routerPeers = []string{"ROUTER", "DEALER"}
)

// subscribeAll is the ZMTP 3.0 subscription to every topic: a message of
// one frame, 0x01 followed by the (empty) prefix.
var subscribeAll = []byte{1}

// DialSub connects a SUB socket to the publisher at addr (host:port) and
// subscribes to every topic. The connection ends when ctx does.
func DialSub(ctx context.Context, addr string, limits Limits) (*Conn, error) {
	c, err := dial(ctx, addr, "SUB", pubPeers, limits)
	if err != nil {
		return nil, err
	}
	if err := c.Send(subscribeAll); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// DialPub connects a PUB socket to the subscriber at addr (host:port): an
// engine's side when it dials a router's bound socket. The caller reads
// the subscriber's subscriptions (Recv) and sends messages (Send). The
// connection ends when ctx does.
func DialPub(ctx context.Context, addr string, limits Limits) (*Conn, error) {
	return dial(ctx, addr, "PUB", subPeers, limits)
}

// DialDealer connects a DEALER socket to the ROUTER at addr (host:port).
// The connection ends when ctx does.
func DialDealer(ctx context.Context, addr string, limits Limits) (*Conn, error) {
	return dial(ctx, addr, "DEALER", routerPeers, limits)
}

func dial(ctx context.Context, addr, ours string, accept []string, limits Limits) (*Conn, error) {
	limits = limits.withDefaults()
	d := net.Dialer{Timeout: limits.HandshakeTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c, err := Handshake(nc, ours, accept, limits)
	if err != nil {
		return nil, err
	}
	closeOnDone(ctx, c)
	return c, nil
}

// closeOnDone closes c when ctx ends.
func closeOnDone(ctx context.Context, c *Conn) {
	context.AfterFunc(ctx, func() { c.Close() })
}
