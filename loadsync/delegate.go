package loadsync

import (
	"slices"

	"github.com/hashicorp/memberlist"
)

// delegate is what memberlist calls. memberlist calls it from its own
// goroutines, some with its node lock held, so no method blocks or calls
// back into memberlist.
type delegate struct{ g *Gossip }

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
	_ memberlist.AliveDelegate = (*delegate)(nil)
	_ memberlist.MergeDelegate = (*delegate)(nil)
)

// NodeMeta announces the State's Meta, which New keeps within 512 bytes,
// memberlist's limit.
func (d *delegate) NodeMeta(limit int) []byte { return d.g.st.Meta() }

// NotifyMsg hands a copy of the packet to the pump, or drops it when the
// pump is that far behind, in packets or in bytes: it must never block
// memberlist's receive loop, nor hold more than the inbox's bounds.
func (d *delegate) NotifyMsg(msg []byte) {
	c := &d.g.counters
	c.packetsReceived.Add(1)
	c.bytesReceived.Add(uint64(len(msg)))
	if d.g.inboxBytes.Add(int64(len(msg))) > int64(d.g.cfg.InboxBytes) {
		d.g.inboxBytes.Add(-int64(len(msg)))
		c.inboxDropped.Add(1)
		return
	}
	select {
	case d.g.inbox <- slices.Clone(msg):
	default:
		d.g.inboxBytes.Add(-int64(len(msg)))
		c.inboxDropped.Add(1)
	}
}

// GetBroadcasts returns nothing. Digests do not ride memberlist's
// piggybacked broadcasts: those reach a few random members per gossip round
// and are not relayed by receivers, so covering the cluster would take
// several retransmissions of every fact, while the pump's direct send
// delivers each fact once to each member within one LoadInterval.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState is our side of a push/pull.
func (d *delegate) LocalState(join bool) []byte {
	buf := d.g.st.LocalState(join)
	d.g.counters.stateBytesSent.Add(uint64(len(buf)))
	return buf
}

// MergeRemoteState is the peer's side of a push/pull.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	d.g.counters.stateBytesReceived.Add(uint64(len(buf)))
	_ = d.g.st.MergeRemoteState(buf) // counted in the State's stats
}

// NotifyJoin reports a new member.
func (d *delegate) NotifyJoin(n *memberlist.Node) { d.notify(MemberJoined, n) }

// NotifyUpdate reports a member's changed metadata.
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.notify(MemberUpdated, n) }

// NotifyLeave drops the member's load at once, then reports it.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	if n.Name != d.g.st.cfg.Origin {
		d.g.st.Forget(n.Name)
	}
	d.notify(MemberLeft, n)
}

// notify records the change and queues it for OnMember. memberlist holds
// its node lock around these calls, so n is read consistently here. The
// State learns whether a live peer reads no msgReport.
func (d *delegate) notify(kind MemberEventKind, n *memberlist.Node) {
	m := memberOf(kind, n, d.g.st.cfg.Origin)
	d.g.st.SetLegacyPeers(d.g.members.apply(kind, m))
	if d.g.cfg.OnMember != nil {
		d.g.events.push(MemberEvent{Kind: kind, Member: m})
	}
}

// NotifyAlive refuses a node whose metadata fails CheckJoin, so that a
// misconfigured replica never becomes a peer, whichever way we hear of it.
func (d *delegate) NotifyAlive(n *memberlist.Node) error { return d.check(n) }

// NotifyMerge refuses a join with a cluster in which any node fails
// CheckJoin; the joining side's Join then fails with that error.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, n := range peers {
		if n.State == memberlist.StateDead || n.State == memberlist.StateLeft {
			continue // gone members' configs do not matter
		}
		if err := d.check(n); err != nil {
			return err
		}
	}
	return nil
}

func (d *delegate) check(n *memberlist.Node) error {
	if n.Name == d.g.st.cfg.Origin {
		return nil
	}
	err := d.g.st.CheckJoin(n.Meta)
	if err != nil {
		d.g.counters.joinRefusals.Add(1)
		d.g.setRefusal(err)
	}
	return err
}
