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
	for _, pre := range deniedByDefault {
		if pre.Contains(ip) {
			return fmt.Errorf("%w: %s is a link-local or metadata address", ErrRefused, ip)
		}
	}
	if len(p.prefixes) > 0 && len(p.patterns) == 0 {
		return fmt.Errorf("%w: %s is not in --allowed-worker-hosts", ErrRefused, ip)
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
