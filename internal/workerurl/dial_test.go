package workerurl

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
)

// fakeResolver maps names to addresses; nothing is looked up for real.
type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if addrs, ok := r[host]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// connectLog records the addresses a Dialer tried to connect to, and
// connects to none of them.
type connectLog struct {
	mu    sync.Mutex
	tried []string
}

func (c *connectLog) connect(_ context.Context, _, address string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tried = append(c.tried, address)
	return nil, errors.New("the test connects nowhere")
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// A name that resolves to a link-local or metadata address is refused after
// the lookup, and no connection is attempted: not even a SYN leaves.
func TestADialerNeverConnectsToARefusedAddress(t *testing.T) {
	resolver := fakeResolver{
		"metadata.test":  addrs("169.254.169.254"),
		"linklocal.test": addrs("fe80::1"),
		"compat.test":    addrs("::169.254.169.254"),
		"nat64.test":     addrs("64:ff9b::a9fe:a9fe"),
		"sixtofour.test": addrs("2002:a9fe:a9fe::1"),
		"ec2.test":       addrs("fd00:ec2::254"),
	}
	for name := range resolver {
		var log connectLog
		d := Dialer{Resolver: resolver, Connect: log.connect}
		if _, err := d.DialContext(context.Background(), "tcp", name+":80"); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused", name, err)
		}
		if len(log.tried) != 0 {
			t.Errorf("%s: connections attempted to %v", name, log.tried)
		}
	}
}

// Of a name's addresses, only the allowed ones are tried, by address.
func TestADialerTriesOnlyTheAllowedAddresses(t *testing.T) {
	var log connectLog
	d := Dialer{Resolver: fakeResolver{"mixed.test": addrs("169.254.169.254", "127.0.0.1", "fe80::1", "::1")},
		Connect: log.connect}
	if _, err := d.DialContext(context.Background(), "tcp", "mixed.test:8000"); err == nil {
		t.Fatal("the connect hook fails every connect; the dial succeeded")
	}
	if len(log.tried) != 2 || log.tried[0] != "127.0.0.1:8000" || log.tried[1] != "[::1]:8000" {
		t.Fatalf("tried %v, want 127.0.0.1:8000 then [::1]:8000", log.tried)
	}
	onlyTen, _ := ParseHostPolicy([]string{"10.0.0.0/8", "*.svc"})
	log = connectLog{}
	d = Dialer{Policy: onlyTen, Resolver: fakeResolver{"w.svc": addrs("10.1.2.3", "169.254.169.254")}, Connect: log.connect}
	_, _ = d.DialContext(context.Background(), "tcp", "w.svc:80")
	if len(log.tried) != 1 || log.tried[0] != "10.1.2.3:80" {
		t.Fatalf("tried %v, want 10.1.2.3:80 only", log.tried)
	}
}

// An IP literal is checked as it is, without a lookup.
func TestADialerChecksALiteralWithoutALookup(t *testing.T) {
	var log connectLog
	d := Dialer{Resolver: fakeResolver{}, Connect: log.connect}
	for _, a := range []string{"169.254.169.254:80", "[fe80::1]:80", "[::169.254.169.254]:80", "[64:ff9b::a9fe:a9fe]:80"} {
		if _, err := d.DialContext(context.Background(), "tcp", a); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused", a, err)
		}
	}
	if len(log.tried) != 0 {
		t.Fatalf("connections attempted to %v", log.tried)
	}
}

// The IPv6 spellings that carry a link-local or metadata IPv4 address are
// refused as that address is; loopback and ordinary addresses are not.
func TestIPv6SpellingsOfLinkLocalAddressesAreRefused(t *testing.T) {
	var p HostPolicy
	for _, s := range []string{"::169.254.169.254", "64:ff9b::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe", "2002:a9fe:a9fe::1",
		"2001:0:a9fe:a9fe::1", "2001:0:4136:e378:8000:63bf:5601:5601", "::ffff:169.254.169.254"} {
		if err := p.AllowsIP(netip.MustParseAddr(s)); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused", s, err)
		}
	}
	for _, s := range []string{"::1", "127.0.0.1", "64:ff9b::a00:7", "2002:a00:7::1", "2001:db8::1"} {
		if err := p.AllowsIP(netip.MustParseAddr(s)); err != nil {
			t.Errorf("%s: %v, want allowed", s, err)
		}
	}
	for _, raw := range []string{"http://[::169.254.169.254]", "http://[64:ff9b::a9fe:a9fe]:8000", "http://[2002:a9fe:a9fe::1]"} {
		if err := p.Allows(raw); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused at registration", raw, err)
		}
	}
}
