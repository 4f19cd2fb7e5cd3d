package workerurl

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strings"
)

// ErrRefused is wrapped by the errors of a HostPolicy that refuses a worker.
var ErrRefused = errors.New("worker destination refused")

// deniedByDefault are addresses no worker may have unless the operator
// allows them by name: link-local ranges, where cloud metadata services
// answer (169.254.169.254, fd00:ec2::254), and the unspecified addresses.
var deniedByDefault = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("0.0.0.0/32"),
	netip.MustParsePrefix("::/128"),
}

// HostPolicy says which destinations may be registered as workers and
// dialed (--allowed-worker-hosts). Its zero value allows every destination
// but the denied-by-default ones; a policy with entries allows only those.
// It is checked twice: on the URL when a worker is registered, and on the
// address a connection is about to reach, so a name that resolves to a
// refused address is refused too.
type HostPolicy struct {
	prefixes []netip.Prefix
	patterns []string // lowercase host names, with path.Match wildcards
}

// ParseHostPolicy reads --allowed-worker-hosts: CIDRs, IP addresses and
// host name patterns such as *.svc.cluster.local.
func ParseHostPolicy(entries []string) (HostPolicy, error) {
	var p HostPolicy
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		switch {
		case e == "":
		case strings.Contains(e, "/"):
			pre, err := netip.ParsePrefix(e)
			if err != nil {
				return HostPolicy{}, fmt.Errorf("%q is not a CIDR: %w", e, err)
			}
			p.prefixes = append(p.prefixes, pre.Masked())
		default:
			if ip, err := netip.ParseAddr(e); err == nil {
				p.prefixes = append(p.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			if _, err := path.Match(e, ""); err != nil {
				return HostPolicy{}, fmt.Errorf("%q is not a host pattern: %w", e, err)
			}
			p.patterns = append(p.patterns, e)
		}
	}
	return p, nil
}

// Allows parses raw and checks it with AllowsURL.
func (p HostPolicy) Allows(raw string) error {
	u, err := Parse(raw)
	if err != nil {
		return err
	}
	return p.AllowsURL(u)
}

// AllowsURL checks a worker URL when it is registered.
func (p HostPolicy) AllowsURL(u URL) error {
	if ip, ok := u.IP(); ok {
		if err := p.AllowsIP(ip); err != nil || len(p.patterns) == 0 || p.inPrefixes(ip) {
			return err
		}
		return fmt.Errorf("%w: %s is not in --allowed-worker-hosts", ErrRefused, ip)
	}
	if len(p.prefixes)+len(p.patterns) == 0 {
		return nil
	}
	for _, pat := range p.patterns {
		if ok, _ := path.Match(pat, u.Host()); ok {
			return nil
		}
	}
	return fmt.Errorf("%w: host %q is not in --allowed-worker-hosts", ErrRefused, u.Host())
}

// AllowsIP checks an address a connection to a worker is about to reach.
// Where the policy names hosts by pattern, any address but the denied ones
// may be dialed: the name was checked when the worker was registered.
func (p HostPolicy) AllowsIP(ip netip.Addr) error {
	ip = ip.Unmap()
	if p.inPrefixes(ip) {
		return nil
	}
	if deniedAddress(ip) {
		return fmt.Errorf("%w: %s is a link-local or metadata address", ErrRefused, ip)
	}
	if len(p.prefixes) > 0 && len(p.patterns) == 0 {
		return fmt.Errorf("%w: %s is not in --allowed-worker-hosts", ErrRefused, ip)
	}
	return nil
}

// deniedAddress reports whether ip is denied by default, as it is written
// or as the IPv4 address an IPv6 spelling carries (IPv4-compatible, NAT64,
// 6to4, Teredo): [::169.254.169.254], [64:ff9b::a9fe:a9fe] and
// [2002:a9fe:a9fe::1] may all end at the metadata service.
func deniedAddress(ip netip.Addr) bool {
	for _, pre := range deniedByDefault {
		if pre.Contains(ip) {
			return true
		}
	}
	for _, v4 := range embeddedIPv4(ip) {
		for _, pre := range deniedByDefault {
			if pre.Contains(v4) {
				return true
			}
		}
	}
	return false
}

// The IPv6 ranges that carry an IPv4 address.
var (
	ipv4Compatible = netip.MustParsePrefix("::/96")          // RFC 4291 2.5.5.1, deprecated
	nat64          = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052, the well-known prefix
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215; assumed /96 as above
	sixToFour      = netip.MustParsePrefix("2002::/16")      // RFC 3056
	teredo         = netip.MustParsePrefix("2001::/32")      // RFC 4380
)

// embeddedIPv4 returns the IPv4 addresses an IPv6 address carries.
func embeddedIPv4(ip netip.Addr) []netip.Addr {
	if !ip.Is6() {
		return nil
	}
	b := ip.As16()
	last := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case ipv4Compatible.Contains(ip), nat64.Contains(ip), nat64Local.Contains(ip):
		return []netip.Addr{last}
	case sixToFour.Contains(ip):
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	case teredo.Contains(ip):
		client := [4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff}
		return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}
	}
	return nil
}

func (p HostPolicy) inPrefixes(ip netip.Addr) bool {
	for _, pre := range p.prefixes {
		if pre.Contains(ip.Unmap()) {
			return true
		}
	}
	return false
}
