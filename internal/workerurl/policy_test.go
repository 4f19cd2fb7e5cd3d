package workerurl

import (
	"errors"
	"net/netip"
	"testing"
)

func mustParse(t *testing.T, raw string) URL {
	t.Helper()
	u, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The policy is checked on URLs and addresses only: nothing is contacted.
func TestByDefaultLinkLocalAndMetadataAddressesAreRefused(t *testing.T) {
	var p HostPolicy
	for _, raw := range []string{"http://169.254.169.254", "http://[fd00:ec2::254]", "http://[fe80::1]:80",
		"http://0xa9fea9fe", "http://0.0.0.0:80", "http://[::ffff:169.254.1.1]"} {
		if err := p.AllowsURL(mustParse(t, raw)); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused", raw, err)
		}
	}
	for _, raw := range []string{"http://127.0.0.1:8000", "http://10.0.0.7:8000", "http://gpu-1.lan:8000"} {
		if err := p.AllowsURL(mustParse(t, raw)); err != nil {
			t.Errorf("%s: %v, want allowed", raw, err)
		}
	}
}

func TestAnAllowListAllowsOnlyWhatItNames(t *testing.T) {
	p, err := ParseHostPolicy([]string{"10.0.0.0/8", "127.0.0.1", "*.svc.cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	for raw, allowed := range map[string]bool{
		"http://10.1.2.3:8000": true, "http://127.0.0.1:9": true, "http://127.0.0.2:9": false,
		"http://vllm-0.vllm.svc.cluster.local:8000": true, "http://gpu-1.lan:8000": false,
		"http://169.254.169.254": false,
	} {
		if err := p.AllowsURL(mustParse(t, raw)); (err == nil) != allowed {
			t.Errorf("%s: %v, want allowed=%v", raw, err, allowed)
		}
	}
	if err := p.AllowsIP(netip.MustParseAddr("169.254.169.254")); err == nil {
		t.Error("a name that resolves to the metadata address was allowed to be dialed")
	}
	onlyNets, _ := ParseHostPolicy([]string{"10.0.0.0/8"})
	if err := onlyNets.AllowsIP(netip.MustParseAddr("192.168.1.1")); err == nil {
		t.Error("an address outside the only allowed network was allowed to be dialed")
	}
	if _, err := ParseHostPolicy([]string{"10.0.0.0/33"}); err == nil {
		t.Error("a bad CIDR was accepted")
	}
}
