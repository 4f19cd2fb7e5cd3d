package workerurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Resolver looks up the addresses of a host name; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer is the one way the router connects to a worker: inference,
// health probes, recovery probes, /metrics scrapes, model discovery and
// fan-outs all dial through it. It resolves a name itself, checks every
// address with its Policy, and connects only to an address the policy
// allows, by that address: a name that resolves to a metadata or
// link-local address reaches nothing, and no packet is sent to it. Its
// zero value dials with the default policy (link-local and metadata
// refused) and the system resolver. Safe for concurrent use.
type Dialer struct {
	// Policy decides which addresses may be reached (--allowed-worker-hosts).
	Policy HostPolicy
	// Timeout bounds one connect, resolution included; 0 is none (the
	// context's deadline still holds).
	Timeout time.Duration
	// Resolver looks names up; nil is net.DefaultResolver.
	Resolver Resolver
	// Connect opens a TCP connection to an IP:port the policy allowed; nil
	// is a net.Dialer. Tests record connection attempts with it.
	Connect func(ctx context.Context, network, address string) (net.Conn, error)
}

// DialContext connects to address (host:port) over TCP, trying the
// allowed addresses of host in the order the resolver gave them. It fails
// with an error wrapping ErrRefused when the policy allows none of them.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	allowed, err := d.lookup(ctx, network, host)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	var errs []error
	for _, ip := range allowed {
		conn, err := d.connect(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// Resolve is the address a connection to hostport (host:port) reaches: the
// first of host's addresses the policy allows, as ip:port, resolved and
// checked as DialContext does, for a client that dials by itself (the ZMQ
// sockets of the KV events). The host is first checked as a worker URL's is
// at registration (its name against the policy's patterns). It fails with
// an error wrapping ErrRefused when the policy allows none of them.
func (d *Dialer) Resolve(ctx context.Context, hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", err
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	if err := d.Policy.Allows("http://" + hostport); err != nil {
		return "", err
	}
	allowed, err := d.lookup(ctx, "tcp", host)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", hostport, err)
	}
	return net.JoinHostPort(allowed[0].String(), port), nil
}

// lookup is host's addresses that the policy allows, at least one.
func (d *Dialer) lookup(ctx context.Context, network, host string) ([]netip.Addr, error) {
	addrs, err := d.resolve(ctx, network, host)
	if err != nil {
		return nil, err
	}
	allowed, refusal := d.allowed(addrs)
	if len(allowed) == 0 {
		return nil, refusal
	}
	return allowed, nil
}

// resolve returns host's addresses: itself when it is an IP literal.
func (d *Dialer) resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	r := d.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ipNet := "ip"
	switch network {
	case "tcp4":
		ipNet = "ip4"
	case "tcp6":
		ipNet = "ip6"
	}
	addrs, err := r.LookupNetIP(ctx, ipNet, host)
	if err == nil && len(addrs) == 0 {
		err = fmt.Errorf("no address for %s", host)
	}
	return addrs, err
}

// allowed keeps the addresses the policy allows, and says why the first
// refused one was refused.
func (d *Dialer) allowed(addrs []netip.Addr) ([]netip.Addr, error) {
	var ok []netip.Addr
	var refusal error
	for _, ip := range addrs {
		if err := d.Policy.AllowsIP(ip); err != nil {
			refusal = cmpOr(refusal, err)
			continue
		}
		ok = append(ok, ip.Unmap()) // an IPv4 address is dialed as one
	}
	return ok, refusal
}

func (d *Dialer) connect(ctx context.Context, network, address string) (net.Conn, error) {
	if d.Connect != nil {
		return d.Connect(ctx, network, address)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
