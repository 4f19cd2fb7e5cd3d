package loadsync

import (
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// Defaults of GossipConfig.
const (
	// DefaultBindAddr is memberlist's usual port on every interface.
	DefaultBindAddr = "0.0.0.0:7946"
	// DefaultLeaveTimeout bounds how long Stop waits for the leave
	// message to reach a peer. Stop returns as soon as it went out; the
	// bound matters on a starved host, where at 1 s the leave was
	// sometimes not sent before shutdown and the peers saw a death
	// (TestStatusSaysWhetherAReplicaLeftOrDied, in loaded full runs).
	DefaultLeaveTimeout = 5 * time.Second
	// DefaultInboxPackets bounds the packets received but not yet merged;
	// beyond it NotifyMsg drops packets rather than block memberlist's
	// receive loop (a dropped load report is superseded by the next).
	DefaultInboxPackets = 4096
	// DefaultInboxBytes bounds the bytes of those packets: 4,096 packets of
	// the largest size would hold 260 MB.
	DefaultInboxBytes = 16 << 20
	// DefaultDeadNodeReclaimTime lets a replica that died come back under
	// its name at a new address (a rescheduled container) 10 s after it
	// was declared dead; memberlist alone would refuse it for good.
	DefaultDeadNodeReclaimTime = 10 * time.Second
	// DefaultUpdateTimeout bounds SetTags' wait for its broadcast.
	DefaultUpdateTimeout = time.Second
)

// GossipConfig configures the memberlist side of a Gossip.
type GossipConfig struct {
	// BindAddr is the host:port to listen on, UDP and TCP. Port 0 picks a
	// free port (see Gossip.LocalAddr). Default DefaultBindAddr.
	BindAddr string
	// AdvertiseAddr is the ip:port peers should dial, when it differs from
	// the bound address (NAT, containers). Default: the bound address.
	AdvertiseAddr string
	// Join lists host:port addresses of existing members. Empty starts a
	// new cluster.
	Join []string
	// SecretKey enables AES-GCM encryption of all gossip; 16, 24 or 32
	// bytes (see DecodeGossipKey). Every member must use the same key.
	SecretKey []byte
	// Logger receives memberlist's log lines. Default: discarded.
	Logger *log.Logger
	// OnMember is told of members joining, leaving (or dying) and
	// updating, in order, from a goroutine owned by Gossip; it may block
	// (to reconcile Raft membership, say) without stalling gossip, but
	// must return for Stop to finish.
	OnMember func(MemberEvent)
	// LeaveTimeout bounds Stop's leave broadcast. Default 5 s.
	LeaveTimeout time.Duration
	// InboxPackets bounds received packets awaiting merge. Default 4096.
	InboxPackets int
	// InboxBytes bounds their bytes. Default 16 MiB.
	InboxBytes int
	// LocalNetwork uses memberlist's timings for a loopback or local
	// network (faster probes) instead of its LAN timings.
	LocalNetwork bool
	// DeadNodeReclaimTime is how long after a member was declared dead
	// another node may take its name at a different address. Default
	// DefaultDeadNodeReclaimTime; a member that left gracefully may come
	// back at a new address at once.
	DeadNodeReclaimTime time.Duration
	// UpdateTimeout bounds SetTags' wait for the broadcast of the new
	// metadata. Default 1 s.
	UpdateTimeout time.Duration
	// Channels are kinds of messages that ride the gossip beside the
	// State's own (channel.go).
	Channels []Channel
}

// DecodeGossipKey decodes a base64 gossip key (the --gossip-key flag) and
// checks that it is an AES-128, -192 or -256 key.
func DecodeGossipKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: gossip key is not base64: %w", ErrInvalidConfig, err)
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return key, nil
}

func checkKey(key []byte) error {
	switch len(key) {
	case 0, 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%w: gossip key is %d bytes, want 16, 24 or 32", ErrInvalidConfig, len(key))
}

func (c GossipConfig) withDefaults() GossipConfig {
	if c.BindAddr == "" {
		c.BindAddr = DefaultBindAddr
	}
	c.LeaveTimeout = orDefault(c.LeaveTimeout, DefaultLeaveTimeout)
	c.InboxPackets = orDefault(c.InboxPackets, DefaultInboxPackets)
	c.InboxBytes = orDefault(c.InboxBytes, DefaultInboxBytes)
	c.DeadNodeReclaimTime = orDefault(c.DeadNodeReclaimTime, DefaultDeadNodeReclaimTime)
	c.UpdateTimeout = orDefault(c.UpdateTimeout, DefaultUpdateTimeout)
	return c
}

// memberlistConfig translates c into memberlist's configuration for a node
// named name whose delegates are d.
func (c GossipConfig) memberlistConfig(name string, d *delegate) (*memberlist.Config, error) {
	if err := checkKey(c.SecretKey); err != nil {
		return nil, err
	}
	mc := memberlist.DefaultLANConfig()
	if c.LocalNetwork {
		mc = memberlist.DefaultLocalConfig()
	}
	mc.Name = name
	var err error
	if mc.BindAddr, mc.BindPort, err = splitAddr("BindAddr", c.BindAddr); err != nil {
		return nil, err
	}
	mc.AdvertisePort = mc.BindPort
	if c.AdvertiseAddr != "" {
		if mc.AdvertiseAddr, mc.AdvertisePort, err = splitAddr("AdvertiseAddr", c.AdvertiseAddr); err != nil {
			return nil, err
		}
		if mc.AdvertiseAddr, err = resolveIP(mc.AdvertiseAddr); err != nil {
			return nil, err
		}
	}
	mc.SecretKey = c.SecretKey
	mc.DeadNodeReclaimTime = c.DeadNodeReclaimTime
	// Our packets are binary and mostly random hashes: compression costs
	// CPU on every packet and saves almost nothing.
	mc.EnableCompression = false
	mc.Delegate, mc.Events, mc.Alive, mc.Merge = d, d, d, d
	mc.Logger = c.Logger
	if c.Logger == nil {
		mc.LogOutput = io.Discard
	}
	return mc, nil
}

// resolveIP turns an advertised host name (a container's service name, say)
// into the IP address memberlist needs to advertise.
func resolveIP(host string) (string, error) {
	if host == "" || net.ParseIP(host) != nil {
		return host, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("%w: AdvertiseAddr host %q does not resolve: %v", ErrInvalidConfig, host, err)
	}
	for _, ip := range ips {
		if v4 := ip.To4(); v4 != nil {
			return v4.String(), nil
		}
	}
	return ips[0].String(), nil
}

func splitAddr(field, addr string) (string, int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s %q: %w", ErrInvalidConfig, field, addr, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s %q: bad port: %w", ErrInvalidConfig, field, addr, err)
	}
	return host, int(port), nil
}
