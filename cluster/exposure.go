package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
)

// A replica whose links to other replicas are reachable from the network
// must not take orders from whoever reaches them: with a gossip or Raft
// bind beyond loopback, it needs --gossip-key (else anyone on the network
// reads and forges gossip) and cluster TLS (else anyone rewrites the
// registry with one forged Raft message). --insecure-cluster is the
// operator saying the network itself is trusted. The API port is another
// edge: a lone replica serving clients on 0.0.0.0 (a drop-in for
// vllm-router) has no replica link to protect; its clients are kept out by
// --api-keys and its admin API by --admin-token.

// exposedBinds lists, as "--flag addr", the replica-link binds of c that
// are not loopback.
func (c Config) exposedBinds() []string {
	var out []string
	for _, b := range []struct{ flag, addr string }{
		{"gossip-bind", c.GossipBind}, {"raft-bind", c.RaftBind},
	} {
		if !loopbackBind(b.addr) {
			out = append(out, fmt.Sprintf("--%s %s", b.flag, b.addr))
		}
	}
	return out
}

// loopbackBind reports whether host:port listens on loopback only. An
// empty host (every interface) and host names other than localhost are
// not: they are not resolved here, and most resolve beyond loopback.
func loopbackBind(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false // refused as malformed elsewhere
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(host, "localhost")
}

// validateExposure refuses a replica that binds beyond loopback without a
// gossip key and cluster TLS, naming each missing flag, unless
// InsecureCluster is set.
func (c Config) validateExposure() error {
	exposed := c.exposedBinds()
	if len(exposed) == 0 || c.InsecureCluster {
		return nil
	}
	why := fmt.Sprintf("required because %s %s not loopback; or set --insecure-cluster to accept unauthenticated replica links",
		strings.Join(exposed, " and "), pluralIs(len(exposed)))
	var errs []error
	if len(c.GossipKey) == 0 {
		errs = append(errs, flagErr("gossip-key", "%s", why))
	}
	if !c.ClusterTLS.Enabled() {
		errs = append(errs, flagErr("cluster-tls-cert", "with --cluster-tls-key and --cluster-tls-ca (see `router tls init`), %s", why))
	}
	return errors.Join(errs...)
}

func pluralIs(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// warnIfInsecure says to log, at start, what --insecure-cluster leaves open.
func (c Config) warnIfInsecure(log *slog.Logger) {
	exposed := c.exposedBinds()
	if len(exposed) == 0 || len(c.GossipKey) != 0 && c.ClusterTLS.Enabled() {
		return
	}
	log.Warn("--insecure-cluster: replica links are reachable beyond loopback without authentication",
		"binds", exposed, "gossip_encrypted", len(c.GossipKey) != 0, "cluster_tls", c.ClusterTLS.Enabled())
}
