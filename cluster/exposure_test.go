package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/cluster/link"
)

// Checked on the configuration alone: nothing here binds beyond loopback.
func TestAReplicaBeyondLoopbackNeedsAGossipKeyAndClusterTLS(t *testing.T) {
	key := []byte("0123456789abcdef")
	files := link.TLSFiles{CertFile: "n1.pem", KeyFile: "n1-key.pem", CAFile: "ca.pem"}
	cases := map[string]struct {
		adjust  func(*Config)
		mention []string // empty: accepted
		absent  []string
	}{
		"every bind on loopback": {adjust: func(*Config) {}},
		"localhost is loopback":  {adjust: func(c *Config) { c.HTTPAddr = "localhost:8080" }},
		"raft on every interface": {adjust: func(c *Config) { c.RaftBind, c.RaftAdvertise = "0.0.0.0:7947", "10.0.0.1:7947" },
			mention: []string{"--gossip-key: required because --raft-bind 0.0.0.0:7947 is not loopback", "--cluster-tls-cert", "--cluster-tls-key", "--cluster-tls-ca", "--insecure-cluster"}},
		"the API alone on every interface": {adjust: func(c *Config) { c.HTTPAddr = ":8080" }},
		"gossip on a host name": {adjust: func(c *Config) { c.GossipBind = "r1:7946" },
			mention: []string{"--gossip-bind r1:7946", "--gossip-key"}},
		"a key but no TLS": {adjust: func(c *Config) { c.GossipBind, c.GossipKey = "10.0.0.1:7946", key },
			mention: []string{"--cluster-tls-cert"}, absent: []string{"--gossip-key"}},
		"TLS but no key": {adjust: func(c *Config) { c.GossipBind, c.ClusterTLS = "10.0.0.1:7946", files },
			mention: []string{"--gossip-key"}, absent: []string{"--cluster-tls-cert"}},
		"a key and TLS":      {adjust: func(c *Config) { c.GossipBind, c.GossipKey, c.ClusterTLS = "10.0.0.1:7946", key, files }},
		"--insecure-cluster": {adjust: func(c *Config) { c.HTTPAddr, c.RaftBind, c.InsecureCluster = "0.0.0.0:8080", "0.0.0.0:7947", true }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			tc.adjust(&cfg)
			err := cfg.Validate()
			if len(tc.mention) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *FlagError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FlagError", err)
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("err = %v\nwant it to mention %q", err, m)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(err.Error(), a) {
					t.Errorf("err = %v\nshould not mention %q", err, a)
				}
			}
		})
	}
}

func TestClusterTLSFlagsComeTogether(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.ClusterTLS = link.TLSFiles{CertFile: "n1.pem"}
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--cluster-tls-key") || !strings.Contains(err.Error(), "--cluster-tls-ca") ||
		strings.Contains(err.Error(), "--cluster-tls-cert:") {
		t.Fatalf("err = %v, want the missing --cluster-tls-key and --cluster-tls-ca named", err)
	}
}

func TestABadPrometheusPortIsRefusedNamingTheFlag(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:70000", "127.0.0.1:-1", "127.0.0.1:x"} {
		cfg := testConfig(t, t.TempDir())
		cfg.MetricsAddr = addr
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--prometheus-port") {
			t.Errorf("MetricsAddr %s: err = %v", addr, err)
		}
	}
}
