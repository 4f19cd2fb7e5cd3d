package loadsync

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"k8s.io/utils/clock"
)

// Gossip runs a State over a hashicorp/memberlist cluster. memberlist
// carries liveness, encryption, the join check and the push/pull of full
// state; Gossip's own goroutine sends the State's packets straight to every
// live member each LoadInterval (UDP, best effort) and merges what arrives.
//
// Gossip owns two goroutines: the pump (ticks and inbound packets, in that
// order of arrival) and the event goroutine (OnMember). Stop ends both,
// leaves the cluster and shuts memberlist down.
type Gossip struct {
	st    *State
	clock clock.WithTicker
	cfg   GossipConfig
	ml    *memberlist.Memberlist
	// keyring is memberlist's, nil without a SecretKey (keyring.go).
	keyring *memberlist.Keyring

	inbox chan []byte
	// inboxBytes is what the inbox holds, within GossipConfig.InboxBytes.
	inboxBytes atomic.Int64
	events     *eventQueue
	members    memberTable
	stop       chan struct{}
	wg         sync.WaitGroup

	refusalMu sync.Mutex
	refusal   error // the last peer refused by CheckJoin, for Join's error

	counters gossipCounters
	stopOnce sync.Once
	stopErr  error
}

// Start creates the memberlist node named after st's Origin, joins
// cfg.Join if any, and starts gossiping st. A join refused because of a
// cluster configuration mismatch returns an error wrapping the
// *ConfigMismatchError; one that reached nobody wraps ErrJoin. clk stamps
// reports and expiry and paces them: clock.RealClock{} outside tests.
func Start(cfg GossipConfig, st *State, clk clock.WithTicker) (*Gossip, error) {
	cfg = cfg.withDefaults()
	g := &Gossip{
		st:     st,
		clock:  clk,
		cfg:    cfg,
		inbox:  make(chan []byte, cfg.InboxPackets),
		events: newEventQueue(),
		stop:   make(chan struct{}),
	}
	g.members.init()
	mc, err := cfg.memberlistConfig(st.cfg.Origin, &delegate{g: g})
	if err != nil {
		return nil, err
	}
	logger := mc.Logger
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	if mc.Transport, err = listen(net.ParseIP(mc.BindAddr), mc.BindPort, logger); err != nil {
		return nil, fmt.Errorf("loadsync: start memberlist: %w", err)
	}
	if g.ml, err = memberlist.Create(mc); err != nil {
		_ = mc.Transport.Shutdown()
		return nil, fmt.Errorf("loadsync: start memberlist: %w", err)
	}
	g.keyring = mc.Keyring
	if len(cfg.Join) > 0 {
		if err := g.Join(cfg.Join); err != nil {
			_ = g.ml.Shutdown()
			return nil, err
		}
	}
	ticker := clk.NewTicker(st.cfg.LoadFlushInterval)
	g.wg.Add(2)
	go g.pump(ticker.C(), ticker.Stop)
	go g.deliverEvents()
	return g, nil
}

// Join contacts the given host:port addresses and merges with their
// cluster. It succeeds if at least one accepted us.
func (g *Gossip) Join(addrs []string) error {
	g.setRefusal(nil)
	if _, err := g.ml.Join(addrs); err != nil {
		if refusal := g.lastRefusal(); refusal != nil {
			return fmt.Errorf("loadsync: join %s: %w", strings.Join(addrs, ","), refusal)
		}
		if keyErr := keyMismatch(addrs, err); keyErr != nil {
			return keyErr
		}
		return fmt.Errorf("%w: %s: %w", ErrJoin, strings.Join(addrs, ","), err)
	}
	return nil
}

// pump is the goroutine that ticks the State and merges inbound packets.
func (g *Gossip) pump(tick <-chan time.Time, stopTicker func()) {
	defer g.wg.Done()
	defer stopTicker()
	for {
		select {
		case <-g.stop:
			return
		case <-tick:
			now := g.clock.Now()
			g.broadcast(g.st.Tick(now))
			g.tickChannels(now)
		case pkt := <-g.inbox:
			g.inboxBytes.Add(-int64(len(pkt)))
			// Errors are counted in the State's stats (or the channels');
			// a stranger's garbage is not worth a log line per packet.
			if c := g.channel(pkt); c != nil {
				if c.Receive(pkt, g.clock.Now()) != nil {
					g.counters.channelErrors.Add(1)
				}
				continue
			}
			_ = g.st.Receive(pkt, g.clock.Now())
		}
	}
}

// broadcast sends every packet to every live member but this one that
// wants its type: one that reads it and not the type that supersedes it
// (types.go), so that a peer of an older build is never sent a type it
// does not know, nor a newer one the older type it replaced. The members
// come from our own table: memberlist's Members hands out nodes its
// goroutines go on changing (a member that comes back at a new address).
func (g *Gossip) broadcast(pkts [][]byte) {
	if len(pkts) == 0 {
		return
	}
	for _, m := range g.members.list() {
		if m.Self {
			continue
		}
		to := memberlist.Address{Addr: m.Addr, Name: m.Name}
		for _, p := range pkts {
			if m.reads.wants(p[0]) {
				g.send(to, p)
			}
		}
	}
}

func (g *Gossip) send(to memberlist.Address, p []byte) {
	if err := g.ml.SendToAddress(to, p); err != nil {
		g.counters.sendErrors.Add(1)
		return
	}
	g.counters.packetsSent.Add(1)
	g.counters.bytesSent.Add(uint64(len(p)))
}

// deliverEvents is the goroutine that runs OnMember.
func (g *Gossip) deliverEvents() {
	defer g.wg.Done()
	for {
		select {
		case <-g.stop:
			return
		case <-g.events.signal:
			for _, ev := range g.events.take() {
				g.cfg.OnMember(ev)
			}
		}
	}
}

// Stop ends Gossip's goroutines, broadcasts a leave (so that peers drop
// this replica's load at once) and shuts memberlist down. It is safe to
// call more than once.
func (g *Gossip) Stop() error {
	g.stopOnce.Do(func() {
		g.halt()
		leaveErr := g.ml.Leave(g.cfg.LeaveTimeout)
		g.stopErr = errors.Join(leaveErr, g.ml.Shutdown())
	})
	return g.stopErr
}

// Kill ends Gossip's goroutines and shuts memberlist down without a leave,
// as a crash would: the peers notice only by failed probes and silence. For
// tests of failure handling; Stop afterwards does nothing.
func (g *Gossip) Kill() error {
	g.stopOnce.Do(func() {
		g.halt()
		g.stopErr = g.ml.Shutdown()
	})
	return g.stopErr
}

// halt ends Gossip's goroutines and waits for them.
func (g *Gossip) halt() {
	close(g.stop)
	g.wg.Wait()
}

// SetTags replaces the tags this replica announces and broadcasts its new
// metadata, waiting at most UpdateTimeout for the broadcast to go out (the
// tags are in place even when that wait times out: push/pull spreads them).
// Meant for rare changes: each one costs a memberlist incarnation.
func (g *Gossip) SetTags(tags map[string]string) error {
	if err := g.st.SetTags(tags); err != nil {
		return err
	}
	if err := g.ml.UpdateNode(g.cfg.UpdateTimeout); err != nil {
		return fmt.Errorf("loadsync: announce tags: %w", err)
	}
	return nil
}

// SetTagsEverywhere is SetTags made certain: once the broadcast is out it
// pushes this replica's state to every live member over TCP (a push/pull,
// as a join does), so that each member holds the new tags when it returns.
// It is for a change that a message sent right after would otherwise
// overtake: memberlist's leave supersedes the tag broadcast in every queue
// it is still waiting in, so a member that the broadcast's few
// transmissions missed would see the leave with the old tags. A member that
// cannot be reached costs at most memberlist's TCP timeout.
func (g *Gossip) SetTagsEverywhere(tags map[string]string) error {
	errs := []error{g.SetTags(tags)}
	return errors.Join(append(errs, g.pushToMembers()...)...)
}

// pushToMembers runs a push/pull with every other live member at once.
func (g *Gossip) pushToMembers() []error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	// Our own table, not memberlist's Members: memberlist goes on changing
	// the nodes it hands out (a member that comes back at a new address).
	for _, m := range g.members.list() {
		if m.Self {
			continue
		}
		// name/addr makes memberlist check that the member answering
		// is the one meant.
		to := m.Name + "/" + m.Addr
		wg.Go(func() {
			if _, err := g.ml.Join([]string{to}); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("loadsync: push tags to %s: %w", to, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

// LocalAddr is this replica's gossip address, ip:port, for peers to join.
func (g *Gossip) LocalAddr() string { return g.ml.LocalNode().Address() }

// Members lists the live members, this replica included, sorted by name.
func (g *Gossip) Members() []Member { return g.members.list() }

func (g *Gossip) setRefusal(err error) {
	g.refusalMu.Lock()
	g.refusal = err
	g.refusalMu.Unlock()
}

func (g *Gossip) lastRefusal() error {
	g.refusalMu.Lock()
	defer g.refusalMu.Unlock()
	return g.refusal
}

// GossipStats are a Gossip's cumulative counters, its State's included.
// Byte counts are of our payloads; memberlist adds about 6 bytes of framing
// per packet, and 29 more when encrypted.
type GossipStats struct {
	Stats
	PacketsSent, BytesSent         uint64 // load and digest packets sent
	PacketsReceived, BytesReceived uint64 // user packets received
	SendErrors                     uint64
	// InboxDropped counts packets dropped because the pump fell behind.
	InboxDropped uint64
	// StateBytesSent and StateBytesReceived count push/pull full state.
	StateBytesSent, StateBytesReceived uint64
	// JoinRefusals counts peers refused by CheckJoin.
	JoinRefusals uint64
	// ChannelErrors counts packets of a Channel that it refused.
	ChannelErrors uint64
}

type gossipCounters struct {
	packetsSent, bytesSent, packetsReceived, bytesReceived       atomic.Uint64
	sendErrors, inboxDropped, stateBytesSent, stateBytesReceived atomic.Uint64
	joinRefusals, channelErrors                                  atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (g *Gossip) Stats() GossipStats {
	c := &g.counters
	return GossipStats{
		Stats:              g.st.Stats(),
		PacketsSent:        c.packetsSent.Load(),
		BytesSent:          c.bytesSent.Load(),
		PacketsReceived:    c.packetsReceived.Load(),
		BytesReceived:      c.bytesReceived.Load(),
		SendErrors:         c.sendErrors.Load(),
		InboxDropped:       c.inboxDropped.Load(),
		StateBytesSent:     c.stateBytesSent.Load(),
		StateBytesReceived: c.stateBytesReceived.Load(),
		JoinRefusals:       c.joinRefusals.Load(),
		ChannelErrors:      c.channelErrors.Load(),
	}
}
