package cluster

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/cluster/membership"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/loadsync"
)

// Tags a replica announces in its gossip metadata. They are not compared at
// join: they say where to reach the replica and how far it is in forming
// the Raft cluster.
const (
	tagRaft   = membership.TagRaft   // Raft address peers dial
	tagAPI    = "api"                // HTTP API address, for the status page (writes are forwarded over the cluster port)
	tagExpect = membership.TagExpect // its --bootstrap-expect
	tagJoined = membership.TagJoined // "1" once it holds Raft state
)

// hashScheme names how blocks are hashed (xxh3, chained, seeded by the
// model name). It is compared at join like the block size, so replicas that
// would disagree on every block hash never form a cluster.
const hashScheme = "xxh3-chain-v1"

// clusterConfig is what every replica must agree on for the block hashes
// to mean the same everywhere, as compared at join: a peer that differs is
// refused with an error naming the fields. The policies, miss placement and
// thresholds are not compared: the replicas route with the copy in the
// registry (routing.go), whatever their flags said.
func (rt Routing) clusterConfig() map[string]string {
	return map[string]string{
		"block_size": strconv.Itoa(rt.BlockSize),
		"hash":       hashScheme,
	}
}

// gossipTags is what this replica announces: where its Raft and API listen,
// its --bootstrap-expect, and whether it holds Raft state yet.
func (r *Replica) gossipTags(joined bool) map[string]string {
	tags := map[string]string{tagRaft: r.raft.Addr(), tagAPI: r.apiAddr, tagExpect: strconv.Itoa(r.cfg.BootstrapExpect)}
	if joined {
		tags[tagJoined] = "1"
	}
	return tags
}

// advertisedAPIAddr is the address peers reach this replica's HTTP API at:
// the listener's, with a wildcard host replaced by the host of the Raft
// address (which raftnode.Open made sure peers can dial).
func advertisedAPIAddr(ln net.Addr, raftAddr string) string {
	host, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return ln.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if raftHost, _, err := net.SplitHostPort(raftAddr); err == nil {
			host = raftHost
		}
	}
	return net.JoinHostPort(host, port)
}

// newCore builds this replica's routing state (core) with its side
// of the load, ownership and verdict gossip, wired to the monitor's
// verdicts.
func (r *Replica) newCore() error {
	rt := r.cfg.Routing
	kv, err := newKVHub(r.cfg.KVEvents, r.dialer, r.metrics, r.log, func() *core.Replica { return r.core }, r.kvPeers())
	if err != nil {
		return err
	}
	r.kv = kv
	c, err := core.New(core.Config{
		KV: kv.source(), KVReservation: r.cfg.KVEvents.Reservation,
		Clock:       r.clock,
		BlockSize:   rt.BlockSize,
		IndexBudget: int(rt.MaxTreeSize / int64(rt.BlockSize)),
		Thresholds:  rt.Thresholds,
		PrefixTTL:   rt.PrefixTTL,
		OnUnderflow: func(w affinity.WorkerID) {
			r.log.Warn("in-flight count would have gone below zero; clamped", "worker", w)
		},
		Gossip: &loadsync.Config{
			Origin:            r.cfg.NodeName,
			LoadFlushInterval: r.cfg.GossipFlushInterval,
			BootEpoch:         uint64(time.Now().UnixNano()),
			ClusterConfig:     rt.clusterConfig(),
			Tags:              r.gossipTags(r.members.Joined()),
			Release:           r.cfg.Release,
			Wires:             Wires(),
			LegacyWires:       legacyWires(),
			ChannelTypes:      r.channelTypes(),
			LocalQueues:       r.admission.localQueues,
			OnQueues:          r.admission.remoteQueues,
		},
		LocalVerdicts: r.localVerdicts,
		OnVerdicts:    r.remoteVerdicts,
		LoRA:          r.cfg.LoRA.Residency,
		NoPeerShare:   r.cfg.CountOwnBurstOnce,
	})
	if err != nil {
		return err
	}
	r.core, r.loads, r.index, r.sync = c, c.Loads(), c.Index(), c.Gossip()
	return nil
}

// startGossip creates the memberlist node and joins --join, if any. A join
// refused because the cluster's routing settings (or its gossip key) differ
// fails at once, naming the fields. While none of the --join addresses
// answers (replicas of a new cluster start in any order), it keeps trying
// for JoinTimeout.
func (r *Replica) startGossip() error {
	cfg := loadsync.GossipConfig{
		BindAddr:      r.cfg.GossipBind,
		AdvertiseAddr: unlessPortZero(r.cfg.GossipAdvertise),
		SecretKey:     r.cfg.GossipKey,
		OnMember:      r.members.MemberChanged,
		LocalNetwork:  r.cfg.GossipLocal,
		Channels:      r.channels(),
	}
	g, err := loadsync.Start(cfg, r.sync, r.clock)
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	r.gossip.Store(g)
	// Read once, now: memberlist's local node changes under UpdateNode,
	// which SetTags calls from other goroutines.
	r.gossipAddr = g.LocalAddr()
	if len(r.cfg.Join) == 0 {
		return nil
	}
	return r.join()
}

// join retries --join with backoff until a peer answers, the join is
// refused, or JoinTimeout passes.
func (r *Replica) join() error {
	deadline := r.clock.Now().Add(r.cfg.JoinTimeout)
	wait := 200 * time.Millisecond
	for {
		err := r.gossiper().Join(r.cfg.Join)
		if err == nil || !errors.Is(err, loadsync.ErrJoin) || r.clock.Now().Add(wait).After(deadline) {
			if err != nil {
				return fmt.Errorf("gossip: %w", err)
			}
			return nil
		}
		r.log.Info("no --join address answers yet; trying again", "join", r.cfg.Join, "in", wait)
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-r.clock.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// unlessPortZero treats an advertise address with port 0 as unset: the
// bound port is only known once bound.
func unlessPortZero(addr string) string {
	if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		return ""
	}
	return addr
}

// localVerdicts reports this replica's wedge and degrade verdicts.
func (r *Replica) localVerdicts(dst []loadsync.Verdict) []loadsync.Verdict {
	for _, v := range r.monitor.Verdicts() {
		dst = append(dst, loadsync.Verdict{Worker: uint32(v.Worker), Kind: uint8(v.Kind), Since: v.Since.UnixNano()})
	}
	return dst
}

// remoteVerdicts hands a peer's verdicts about known workers (the core let
// only those through) to the monitor. nil means the peer withdrew them,
// left, died or went silent: forget them all.
func (r *Replica) remoteVerdicts(origin string, vs []loadsync.Verdict) {
	if vs == nil {
		r.monitor.ForgetOrigin(origin)
		return
	}
	out := make([]health.Verdict, 0, len(vs))
	for _, v := range vs {
		out = append(out, health.Verdict{Worker: health.WorkerID(v.Worker), Kind: health.VerdictKind(v.Kind),
			Since: time.Unix(0, v.Since)})
	}
	r.monitor.SetRemoteVerdicts(origin, out)
}
