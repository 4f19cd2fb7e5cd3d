package loadsync

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"
)

// echoChannel sends what it is given once, and keeps what it receives.
type echoChannel struct {
	typ  byte
	mu   sync.Mutex
	out  [][]byte
	got  [][]byte
	fail bool
}

func (c *echoChannel) Type() byte { return c.typ }

func (c *echoChannel) Outbox(time.Time) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.out
	c.out = nil
	return out
}

func (c *echoChannel) Receive(pkt []byte, _ time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail {
		return errors.New("refused")
	}
	c.got = append(c.got, bytes.Clone(pkt))
	return nil
}

func (c *echoChannel) send(pkt []byte) {
	c.mu.Lock()
	c.out = append(c.out, pkt)
	c.mu.Unlock()
}

func (c *echoChannel) received() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got
}

// A channel's packets reach every peer's channel of the same type, and
// nothing of it reaches the State (which would count a decode error).
func TestAChannelsPacketsReachThePeersChannelNotTheirState(t *testing.T) {
	a, b := &echoChannel{typ: 200}, &echoChannel{typ: 200}
	nodes := []*node{mustStart(t, "r0", nodeOptions{channels: []Channel{a}})}
	nodes = append(nodes, mustStart(t, "r1", nodeOptions{channels: []Channel{b}, join: []string{nodes[0].g.LocalAddr()}}))
	waitFor(t, "both members", func() bool { return len(nodes[1].g.Members()) == 2 })
	a.send([]byte{200, 1, 2, 3})
	waitFor(t, "r1's channel got r0's packet", func() bool { return len(b.received()) == 1 })
	if got := b.received()[0]; !bytes.Equal(got, []byte{200, 1, 2, 3}) {
		t.Fatalf("got %v", got)
	}
	if st := nodes[1].g.Stats(); st.DecodeErrors != 0 {
		t.Errorf("the State decoded a channel's packet: %+v", st)
	}
	b.mu.Lock()
	b.fail = true
	b.mu.Unlock()
	a.send([]byte{200, 9})
	waitFor(t, "a refused packet counted", func() bool { return nodes[1].g.Stats().ChannelErrors == 1 })
}

// A channel's packets go only to the peers that run it (they announce its
// type): a peer without it is not sent them, so it counts no unknown
// message.
func TestAChannelsPacketsGoOnlyToThePeersThatRunIt(t *testing.T) {
	a, b := &echoChannel{typ: 200}, &echoChannel{typ: 200}
	nodes := []*node{mustStart(t, "r0", nodeOptions{channels: []Channel{a}})}
	join := []string{nodes[0].g.LocalAddr()}
	nodes = append(nodes, mustStart(t, "r1", nodeOptions{join: join}))
	nodes = append(nodes, mustStart(t, "r2", nodeOptions{channels: []Channel{b}, join: join}))
	waitFor(t, "every member", func() bool { return len(nodes[0].g.Members()) == 3 })
	a.send([]byte{200, 7})
	waitFor(t, "r2's channel got the packet", func() bool { return len(b.received()) == 1 })
	if st := nodes[1].g.Stats(); st.DecodeErrors != 0 || st.UnknownMessages != 0 {
		t.Errorf("r1, which runs no channel, was sent its packet: %+v", st)
	}
}

// The inbox between memberlist's receive loop and the pump is bounded in
// bytes as well as in packets: a peer that floods it with large packets
// while the pump is behind costs at most the bound, the rest dropped and
// counted.
func TestTheInboxIsBoundedInBytes(t *testing.T) {
	g := &Gossip{cfg: GossipConfig{InboxBytes: 1000}, inbox: make(chan []byte, 100)}
	d := &delegate{g: g}
	for range 5 {
		d.NotifyMsg(make([]byte, 300))
	}
	if len(g.inbox) != 3 || g.inboxBytes.Load() != 900 || g.counters.inboxDropped.Load() != 2 {
		t.Fatalf("%d packets and %d bytes held, %d dropped; want 3, 900, 2", len(g.inbox), g.inboxBytes.Load(),
			g.counters.inboxDropped.Load())
	}
}
