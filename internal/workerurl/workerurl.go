// Package workerurl is the one type of a worker's base URL, shared by the
// registry (which stores its canonical form), the proxy (which sends requests
// under its base path), health checks and discovery. Two spellings of one
// endpoint (127.1, 0x7f000001 and 127.0.0.1; HOST and host; a default port
// left out or written) parse to the same URL, so they are one worker.
package workerurl

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every error Parse returns.
var ErrInvalid = errors.New("invalid worker URL")

// MaxLen bounds the length of a worker URL as written.
const MaxLen = 2048

// URL is a worker's base URL in canonical form. The zero value is not a
// valid URL; get one from Parse.
type URL struct {
	scheme string // "http" or "https"
	host   string // lowercase name, or a canonical IP literal (IPv6 without brackets)
	port   int
	path   string // escaped base path without trailing slashes: "" or "/w1"
}

// Parse validates raw and returns its canonical form: scheme http or https,
// a host, no user info, query or fragment. The host is lowercased and loses a
// trailing dot; IPv4 in any inet_aton spelling (127.1, 0x7f000001,
// 2130706433, 0177.0.0.1) becomes dotted decimal, IPv6 its compressed form,
// IPv4-mapped IPv6 plain IPv4. The port defaults to 80 or 443. Trailing
// slashes of the path are dropped.
func Parse(raw string) (URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return URL{}, invalid("must not be empty")
	}
	if len(raw) > MaxLen {
		return URL{}, invalid("longer than %d bytes", MaxLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return URL{}, invalid("not a URL: %v", err)
	}
	if err := checkShape(u); err != nil {
		return URL{}, err
	}
	w := URL{scheme: strings.ToLower(u.Scheme), path: strings.TrimRight(u.EscapedPath(), "/")}
	if w.host, err = canonicalHost(u.Hostname()); err != nil {
		return URL{}, err
	}
	if w.port, err = parsePort(u.Port(), w.scheme); err != nil {
		return URL{}, err
	}
	return w, nil
}

func checkShape(u *url.URL) error {
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme != "http" && scheme != "https":
		return invalid("scheme must be http or https, got %q", u.Scheme)
	case u.Opaque != "" || u.Hostname() == "":
		return invalid("must have a host")
	case strings.Contains(u.Hostname(), "%"):
		return invalid("must not name an IPv6 zone")
	case u.User != nil:
		return invalid("must not carry user info")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return invalid("must not have a query or fragment")
	case strings.ContainsAny(u.EscapedPath(), "\x00\r\n"):
		return invalid("path must not hold control characters")
	}
	return nil
}

func parsePort(s, scheme string) (int, error) {
	if s == "" {
		if scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	port, err := strconv.Atoi(s)
	if err != nil || port < 1 || port > 65535 {
		return 0, invalid("port %q is not in 1..65535", s)
	}
	return port, nil
}

// canonicalHost lowercases a host name and rewrites IP literals in their
// canonical form.
func canonicalHost(h string) (string, error) {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" {
		return "", invalid("must have a host")
	}
	if strings.Contains(h, ":") {
		ip, err := netip.ParseAddr(h)
		if err != nil {
			return "", invalid("bad IPv6 address %q", h)
		}
		return ip.Unmap().String(), nil
	}
	if !looksNumeric(h) {
		return h, nil
	}
	ip, ok := parseInetAton(h)
	if !ok {
		return "", invalid("bad IPv4 address %q", h)
	}
	return ip.String(), nil
}

// looksNumeric follows the WHATWG URL rule: a host whose last label is a
// number is an IPv4 address, however it is spelt.
func looksNumeric(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if strings.HasPrefix(last, "0x") {
		last = last[2:]
		for _, c := range last {
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
		return true
	}
	for _, c := range last {
		if c < '0' || c > '9' {
			return false
		}
	}
	return last != ""
}

// parseInetAton reads IPv4 as inet_aton does: one to four parts, each
// decimal, 0x hexadecimal or 0-prefixed octal; the last part fills the bytes
// the others leave.
func parseInetAton(h string) (netip.Addr, bool) {
	parts := strings.Split(h, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		n, ok := parseInetPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 0xff {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(4-i)) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

func parseInetPart(p string) (uint64, bool) {
	base := 10
	switch {
	case p == "":
		return 0, false
	case strings.HasPrefix(p, "0x"):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	n, err := strconv.ParseUint(p, base, 32)
	return n, err == nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// String is the canonical form: scheme://host:port/path, IPv6 in brackets.
func (u URL) String() string { return u.scheme + "://" + u.Addr() + u.path }

// Addr is the host:port to dial.
func (u URL) Addr() string {
	host := u.host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(u.port)
}

// Host is the host name or IP literal, without port or brackets.
func (u URL) Host() string { return u.host }

// Port is the TCP port.
func (u URL) Port() int { return u.port }

// TLS reports whether the worker speaks https.
func (u URL) TLS() bool { return u.scheme == "https" }

// BasePath is the escaped path every request to the worker goes under: ""
// or a path such as "/w1" without a trailing slash.
func (u URL) BasePath() string { return u.path }

// Under returns the request URI of path p (which begins with "/", and may
// carry a query) under the base path.
func (u URL) Under(p string) string { return u.path + p }

// IP returns the host as an address when it is an IP literal.
func (u URL) IP() (netip.Addr, bool) {
	ip, err := netip.ParseAddr(u.host)
	return ip, err == nil
}

// IsZero reports whether u is the zero URL (not parsed).
func (u URL) IsZero() bool { return u.scheme == "" }
