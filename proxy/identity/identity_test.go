package identity

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/credential"
	"github.com/kvrouter/kvrouter/proxy/failure"
)

func header(kv ...string) *fasthttp.RequestHeader {
	var h fasthttp.RequestHeader
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &h
}

// A credential is verified only when the API takes keys and it is one of
// them; two different ones are ambiguous.
func TestCallerOf(t *testing.T) {
	var keys Keys
	keys.Replace([]string{"k1", ""})
	if c := keys.CallerOf(header("Authorization", "Bearer k1")); !c.Verified || !c.HasKey() || c.ID != credential.IDOf([]byte("k1")) {
		t.Errorf("a key of --api-keys: %+v, want it verified", c)
	}
	if c := keys.CallerOf(header("Authorization", "Bearer k2")); c.Verified || !c.HasKey() {
		t.Errorf("another key: %+v, want it presented, not verified", c)
	}
	if c := keys.CallerOf(header()); c.Verified || c.HasKey() || c.Ambiguous {
		t.Errorf("no key: %+v", c)
	}
	if c := keys.CallerOf(header("Authorization", "Bearer k1", credential.APIKeyHeader, "k2")); !c.Ambiguous {
		t.Errorf("two different keys: %+v, want it ambiguous", c)
	}
	var none Keys
	if none.Enabled() {
		t.Error("the zero Keys takes keys")
	}
	none.Replace(nil)
	if c := none.CallerOf(header("Authorization", "Bearer k1")); none.Enabled() || c.Verified || !c.HasKey() {
		t.Errorf("without --api-keys: %+v, want a key presented and nothing verified", c)
	}
}

// A verified key's tenant is its own (or one of its own it names); any
// other it names is a 403. Without a verified key the header is taken as
// sent, else the key's tenant, else anonymous.
func TestTenantsOf(t *testing.T) {
	var keys Keys
	keys.Replace([]string{"k1", "k2"})
	tenants := NewTenants("x-tenant", map[string][]string{"k1": {"team-a", "team-b"}})
	k1 := keys.CallerOf(header("Authorization", "Bearer k1"))
	k2 := keys.CallerOf(header("Authorization", "Bearer k2"))
	stranger := keys.CallerOf(header("Authorization", "Bearer k3"))
	nobody := keys.CallerOf(header())
	for _, c := range []struct {
		name   string
		who    *Caller
		h      *fasthttp.RequestHeader
		want   string
		status int
	}{
		{"own first", &k1, header(), "team-a", 0},
		{"own named", &k1, header("x-tenant", "team-b"), "team-b", 0},
		{"not its own", &k1, header("x-tenant", "team-c"), "", fasthttp.StatusForbidden},
		{"no tenants given", &k2, header(), k2.KeyTenant(), 0},
		{"unverified, named", &stranger, header("x-tenant", "team-c"), "team-c", 0},
		{"unverified key", &stranger, header(), stranger.KeyTenant(), 0},
		{"anonymous", &nobody, header(), "anonymous", 0},
		{"unprintable", &nobody, header("x-tenant", "a b"), "anonymous", fasthttp.StatusBadRequest},
	} {
		got, err := tenants.Of(c.h, c.who)
		status := 0
		if err != nil {
			status, _ = failure.StatusOf(err)
		}
		if got != c.want || status != c.status {
			t.Errorf("%s: %q, %v; want %q and status %d", c.name, got, err, c.want, c.status)
		}
	}
	if got, err := NewTenants("", nil).Of(header("x-tenant", "a b"), &nobody); got != "anonymous" || err != nil {
		t.Errorf("no tenant header configured: %q, %v; want anonymous, the header unread", got, err)
	}
}

// A body is charged to its verified key, else to its client's address, an
// IPv6 one by its /64.
func TestClientOf(t *testing.T) {
	verified := Caller{ID: credential.IDOf([]byte("k1")), Verified: true}
	if got := ClientOf(&verified, net.ParseIP("10.0.0.1")); got.Addr || got.ID != verified.ID {
		t.Errorf("a verified key: %+v, want its identity", got)
	}
	var anon Caller
	a, b := ClientOf(&anon, net.ParseIP("2001:db8::1")), ClientOf(&anon, net.ParseIP("2001:db8::ffff:2"))
	if !a.Addr || a != b {
		t.Errorf("two addresses of one /64: %+v and %+v, want one client", a, b)
	}
	if c := ClientOf(&anon, net.ParseIP("2001:db8:0:1::1")); c == a {
		t.Error("two /64s are one client")
	}
	if v4, other := ClientOf(&anon, net.ParseIP("10.0.0.1")), ClientOf(&anon, net.ParseIP("10.0.0.2")); v4 == other {
		t.Error("two IPv4 addresses are one client")
	}
}
