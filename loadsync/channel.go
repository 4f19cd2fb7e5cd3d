package loadsync

import "time"

// Channel is a kind of message that rides the gossip beside the State's
// own: a mechanism of another package (the relay of the engines' KV
// events) that shares the members, the encryption and the pump. Its
// packets go to every live peer as the State's do, straight and best
// effort; what it does about a packet lost is its own business.
//
// Outbox and Receive are called from the pump's goroutine only. A
// replica announces its channels' types (Config.ChannelTypes), and a
// channel's packets go only to the peers that announced its type.
type Channel interface {
	// Type is the first byte of every packet of the channel: one that no
	// message of the State uses (wire.go lists those).
	Type() byte
	// Outbox is what to send every live peer now. The pump asks at every
	// tick (LoadFlushInterval).
	Outbox(now time.Time) [][]byte
	// Receive takes one packet of the channel's type from a peer. An error
	// is counted (GossipStats.ChannelErrors), not logged.
	Receive(pkt []byte, now time.Time) error
}

// channel is the Channel of a packet's type, nil if none.
func (g *Gossip) channel(pkt []byte) Channel {
	if len(pkt) == 0 {
		return nil
	}
	for _, c := range g.cfg.Channels {
		if c.Type() == pkt[0] {
			return c
		}
	}
	return nil
}

// tickChannels sends what every channel has to send.
func (g *Gossip) tickChannels(now time.Time) {
	for _, c := range g.cfg.Channels {
		g.broadcast(c.Outbox(now))
	}
}
