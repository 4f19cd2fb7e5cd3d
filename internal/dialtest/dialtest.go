// Package dialtest holds the fakes that tests of the worker-host policy dial
// through: a resolver that looks nothing up, and a connect step that records
// every attempt and makes only those to loopback, so no packet leaves the
// machine whatever the code under test asks for.
package dialtest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
)

// Resolver maps names to addresses; nothing is looked up for real.
type Resolver map[string]string

// LookupNetIP answers from the map, or as a name that does not exist.
func (r Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// Log records every connection attempt. Safe for concurrent use.
type Log struct {
	mu    sync.Mutex
	tried []string
}

// Connect records address and connects only to 127.0.0.1: an attempt
// anywhere else is recorded and fails, never sent.
func (l *Log) Connect(ctx context.Context, network, address string) (net.Conn, error) {
	l.mu.Lock()
	l.tried = append(l.tried, address)
	l.mu.Unlock()
	if !strings.HasPrefix(address, "127.0.0.1:") {
		return nil, errors.New("the test connects to loopback only")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// Attempts are the addresses connected to or refused so far, in order.
func (l *Log) Attempts() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.tried...)
}
