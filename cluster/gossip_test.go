package cluster

import (
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/loadsync"
)

func TestClusterConfigFitsTheGossipMetadata(t *testing.T) {
	rt := DefaultRouting()
	rt.PD, rt.PrefillMissPlacement = "vllm", "rendezvous"
	rt.PrefillThresholds = Thresholds{CacheThreshold: 0.123456789, BalanceAbs: 123456.5, BalanceRel: 1.23456789}
	rt.DecodeThresholds = rt.PrefillThresholds
	tags := map[string]string{tagRaft: "[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:65535",
		tagAPI: "[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:65535", tagExpect: "100", tagJoined: "1"}
	_, err := loadsync.New(loadsync.Config{Origin: strings.Repeat("n", 63), ClusterConfig: rt.clusterConfig(), Tags: tags})
	if err != nil {
		t.Fatalf("the largest plausible metadata does not fit: %v", err)
	}
}

func TestAdvertisedAPIAddrReplacesAWildcardHost(t *testing.T) {
	cases := map[string]string{"127.0.0.1:8000": "127.0.0.1:8000", "0.0.0.0:8000": "10.1.2.3:8000", "[::]:8000": "10.1.2.3:8000"}
	for bound, want := range cases {
		if got := advertisedAPIAddr(fakeAddr(bound), "10.1.2.3:7947"); got != want {
			t.Errorf("advertisedAPIAddr(%s) = %s, want %s", bound, got, want)
		}
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }
