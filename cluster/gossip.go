package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
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

// replicaGossip is the replica's memberlist side: the gossip node, the tags
// it announces, the join of --join, the leave at stop, and what the other
// parts ask of the membership it sees.
type replicaGossip struct {
	cfg   Config
	log   *slog.Logger
	clock clock.WithTicker
	// node is the memberlist node; a pointer swapped only by tests that
	// cut a replica off the gossip and reopen it (cutGossip, heal_helpers_test.go).
	node atomic.Pointer[loadsync.Gossip]
	// addr is the gossip's address, read once at start.
	addr string
	// raftAddr and apiAddr are where the replica's Raft and API listen,
	// announced in the tags; set once both are bound, before start.
	raftAddr, apiAddr string
}

// current is the gossip node, nil before start made it.
func (g *replicaGossip) current() *loadsync.Gossip { return g.node.Load() }

// tags is what this replica announces: where its Raft and API listen,
// its --bootstrap-expect, and whether it holds Raft state yet.
func (g *replicaGossip) tags(joined bool) map[string]string {
	tags := map[string]string{tagRaft: g.raftAddr, tagAPI: g.apiAddr, tagExpect: strconv.Itoa(g.cfg.BootstrapExpect)}
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
	snapshots := &snapshotFetcher{gossip: r.gossip, rpc: r.rpc, maxBlocks: r.cfg.KVEvents.MaxBlocks}
	peers := kvPeers{origin: r.cfg.NodeName, peers: r.gossip.livePeers, fetch: snapshots.fetch}
	kv, err := newKVHub(r.cfg.KVEvents, r.dialer, r.metrics, r.log, func() *core.Replica { return r.core }, peers)
	if err != nil {
		return err
	}
	r.kv = kv
	verdicts := verdictRelay{r.monitor}
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
			Tags:              r.gossip.tags(r.members.Joined()),
			Release:           r.cfg.Release,
			Wires:             Wires(),
			LegacyWires:       legacyWires(),
			ChannelTypes:      r.cfg.channelTypes(),
			LocalQueues:       r.admission.localQueues,
			OnQueues:          r.admission.remoteQueues,
		},
		LocalVerdicts: verdicts.local,
		OnVerdicts:    verdicts.remote,
		LoRA:          r.cfg.LoRA.Residency,
		NoPeerShare:   r.cfg.CountOwnBurstOnce,
	})
	if err != nil {
		return err
	}
	r.core, r.loads, r.index, r.sync = c, c.Loads(), c.Index(), c.Gossip()
	return nil
}

// start creates the memberlist node over sync, with onMember hearing the
// membership's events and channels riding it, and joins --join, if any. A
// join refused because the cluster's routing settings (or its gossip key)
// differ fails at once, naming the fields. While none of the --join
// addresses answers (replicas of a new cluster start in any order), it
// keeps trying for JoinTimeout, or until ctx ends.
func (g *replicaGossip) start(ctx context.Context, sync *loadsync.State, onMember func(loadsync.MemberEvent),
	channels []loadsync.Channel) error {
	cfg := loadsync.GossipConfig{
		BindAddr:      g.cfg.GossipBind,
		AdvertiseAddr: unlessPortZero(g.cfg.GossipAdvertise),
		SecretKey:     g.cfg.GossipKey,
		OnMember:      onMember,
		LocalNetwork:  g.cfg.GossipLocal,
		Channels:      channels,
	}
	node, err := loadsync.Start(cfg, sync, g.clock)
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	g.node.Store(node)
	// Read once, now: memberlist's local node changes under UpdateNode,
	// which SetTags calls from other goroutines.
	g.addr = node.LocalAddr()
	if len(g.cfg.Join) == 0 {
		return nil
	}
	return g.join(ctx)
}

// join retries --join with backoff until a peer answers, the join is
// refused, JoinTimeout passes or ctx ends.
func (g *replicaGossip) join(ctx context.Context) error {
	deadline := g.clock.Now().Add(g.cfg.JoinTimeout)
	wait := 200 * time.Millisecond
	for {
		err := g.current().Join(g.cfg.Join)
		if err == nil || !errors.Is(err, loadsync.ErrJoin) || g.clock.Now().Add(wait).After(deadline) {
			if err != nil {
				return fmt.Errorf("gossip: %w", err)
			}
			return nil
		}
		g.log.Info("no --join address answers yet; trying again", "join", g.cfg.Join, "in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-g.clock.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// stop leaves the gossip, or, with leave false, kills the node as a crash
// would; joined says whether the replica holds Raft state (its tags).
func (g *replicaGossip) stop(leave, joined bool) error {
	if !leave {
		return g.current().Kill()
	}
	// Say that this is a leave, not a death, so that the peers' status
	// pages tell the truth (memberlist's events do not), to every peer
	// before the leave can overtake it.
	tags := g.tags(joined)
	tags[membership.TagLeaving] = "1"
	if err := g.current().SetTagsEverywhere(tags); err != nil {
		g.log.Debug("announcing the leave", "err", err)
	}
	return g.current().Stop()
}

// ownerSecrets are the secrets the tier shares, for the seals of stored
// responses' owners (proxy.Deps.OwnerSecrets): the gossip keyring, its
// primary first, so that a key rotation seals with the new key and still
// accepts what the old one sealed until it is removed. None without a
// gossip key: each replica then seals with a secret of its own.
func (g *replicaGossip) ownerSecrets() [][]byte {
	node := g.current()
	if node == nil {
		return nil
	}
	kr, err := node.Keyring()
	if err != nil {
		return nil
	}
	secrets := [][]byte{kr.Primary}
	for _, k := range kr.Keys {
		if !bytes.Equal(k, kr.Primary) {
			secrets = append(secrets, k)
		}
	}
	return secrets
}

// livePeers names the live members but this one.
func (g *replicaGossip) livePeers() []string {
	node := g.current()
	if node == nil {
		return nil
	}
	var names []string
	for _, m := range node.Members() {
		if !m.Self {
			names = append(names, m.Name)
		}
	}
	return names
}

// peerRPCAddr is the cluster port of live member name, "" if none.
func (g *replicaGossip) peerRPCAddr(name string) string {
	node := g.current()
	if node == nil {
		return ""
	}
	for _, m := range node.Members() {
		if m.Name == name && !m.Self {
			return m.Tags[tagRaft]
		}
	}
	return ""
}

// unlessPortZero treats an advertise address with port 0 as unset: the
// bound port is only known once bound.
func unlessPortZero(addr string) string {
	if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		return ""
	}
	return addr
}
