package raftnode

import (
	"strings"
	"testing"
)

func TestAWildcardBindNeedsAnAdvertiseAddress(t *testing.T) {
	// Checked on the pure function: these addresses are never bound here.
	for _, bind := range []string{"0.0.0.0:7000", ":7000", "[::]:7000"} {
		if _, err := advertiseAddr(Config{BindAddr: bind}); err == nil || !strings.Contains(err.Error(), "--raft-advertise") {
			t.Errorf("bind %s without advertise: err = %v", bind, err)
		}
		if addr, err := advertiseAddr(Config{BindAddr: bind, AdvertiseAddr: "127.0.0.1:7000"}); err != nil || addr.String() != "127.0.0.1:7000" {
			t.Errorf("bind %s with advertise: %v, %v", bind, addr, err)
		}
	}
	// A name stays a name, so a replica that comes back at another IP keeps
	// its Raft address.
	if addr, err := advertiseAddr(Config{BindAddr: "0.0.0.0:7000", AdvertiseAddr: "localhost:7000"}); err != nil || addr.String() != "localhost:7000" {
		t.Fatalf("advertising a name: %v %v, want localhost:7000", addr, err)
	}
	if addr, err := advertiseAddr(Config{BindAddr: "127.0.0.1:7000"}); err != nil || addr != nil {
		t.Errorf("loopback bind: %v, %v; want the bound address (nil)", addr, err)
	}
}
