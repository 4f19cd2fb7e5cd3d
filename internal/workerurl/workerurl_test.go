package workerurl

import (
	"errors"
	"testing"
)

func TestSpellingsOfOneEndpointAreOneURL(t *testing.T) {
	for _, raw := range []string{
		"http://127.0.0.1:8000", "http://127.1:8000", "http://0x7f000001:8000", "http://2130706433:8000",
		"http://0177.0.0.1:8000", "http://127.0.0.1:08000/", "HTTP://127.0.0.1:8000//", "http://[::ffff:127.0.0.1]:8000",
	} {
		u, err := Parse(raw)
		if err != nil || u.String() != "http://127.0.0.1:8000" {
			t.Errorf("Parse(%q) = %q, %v; want http://127.0.0.1:8000", raw, u, err)
		}
	}
}

func TestCanonicalForms(t *testing.T) {
	for raw, want := range map[string]string{
		"http://a:1":                   "http://a:1",
		"HTTPS://Host.Example:8443/":   "https://host.example:8443",
		"http://host.example.:80":      "http://host.example:80",
		"http://h":                     "http://h:80",
		"https://h":                    "https://h:443",
		"http://[::1]:9000":            "http://[::1]:9000",
		"http://[0:0::1]:9000":         "http://[::1]:9000",
		"http://h:8000/Prefix/v1/":     "http://h:8000/Prefix/v1",
		" http://gw/w1 ":               "http://gw:80/w1",
		"http://10.1:80":               "http://10.0.0.1:80",
		"http://worker-1.lan:8000/%41": "http://worker-1.lan:8000/%41",
	} {
		u, err := Parse(raw)
		if err != nil || u.String() != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", raw, u, err, want)
		}
	}
}

func TestRefusals(t *testing.T) {
	for _, raw := range []string{"", "h:8000", "ftp://h:21", "http://:80", "http://h:0", "http://h:65536",
		"http://h:x", "http://u:p@h:1", "http://h:1?q=1", "http://h:1#f", "http://h:1?", "mailto:a@b",
		"http://[fe80::1%25eth0]:800", "http://1.2.3.4.5:80", "http://10.0.0.256:80",
		"http://999999999999:80"} {
		if u, err := Parse(raw); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %q, %v; want ErrInvalid", raw, u, err)
		}
	}
}

func TestPartsOfAURL(t *testing.T) {
	u, err := Parse("https://[2001:db8::1]/base/")
	if err != nil {
		t.Fatal(err)
	}
	if u.Addr() != "[2001:db8::1]:443" || !u.TLS() || u.Host() != "2001:db8::1" || u.Port() != 443 {
		t.Fatalf("addr %q tls %v host %q port %d", u.Addr(), u.TLS(), u.Host(), u.Port())
	}
	if got := u.Under("/v1/models?x=1"); got != "/base/v1/models?x=1" {
		t.Fatalf("Under = %q", got)
	}
	if ip, ok := u.IP(); !ok || ip.String() != "2001:db8::1" {
		t.Fatalf("IP = %v %v", ip, ok)
	}
}

// FuzzParse checks that the canonical form is its own canonical form.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"http://a:1", "HTTPS://H:0443/x/", "http://[::1]:80", "http://127.1/%41", "http://0x7f.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := Parse(raw)
		if err != nil {
			return
		}
		again, err := Parse(u.String())
		if err != nil || again != u {
			t.Fatalf("Parse(%q) = %q, but Parse(%q) = %q, %v", raw, u, u, again, err)
		}
	})
}
