package fleet

import (
	"math/rand/v2"
	"time"
)

// network carries gossip packets between replicas: every packet a replica's
// Tick returns goes to every other replica after a fixed delay, each copy
// lost independently with a fixed probability. It counts what was sent,
// lost copies included, as a real network interface would.
type network struct {
	delay time.Duration
	loss  float64
	rand  *rand.Rand

	bytesSent, packetsSent, packetsLost uint64
}

// send accounts for pkts sent to one peer and returns the ones that arrive:
// pkts itself when none is lost.
func (n *network) send(pkts [][]byte) [][]byte {
	var kept [][]byte
	lostAny := false
	for i, p := range pkts {
		n.packetsSent++
		n.bytesSent += uint64(len(p))
		lost := n.loss > 0 && n.rand.Float64() < n.loss
		if lost && !lostAny {
			kept, lostAny = append([][]byte(nil), pkts[:i]...), true
		}
		switch {
		case lost:
			n.packetsLost++
		case lostAny:
			kept = append(kept, p)
		}
	}
	if !lostAny {
		return pkts
	}
	return kept
}
