package fleet

import (
	"math/rand/v2"
	"testing"
)

func TestLosslessNetworkDeliversEveryPacketAndCountsBytes(t *testing.T) {
	n := network{}
	pkts := [][]byte{make([]byte, 100), make([]byte, 50)}
	if got := n.send(pkts); len(got) != 2 || &got[0] != &pkts[0] {
		t.Errorf("sent 2 packets, %d arrive", len(got))
	}
	if n.bytesSent != 150 || n.packetsSent != 2 || n.packetsLost != 0 {
		t.Errorf("counted %d bytes, %d packets, %d lost; want 150, 2, 0", n.bytesSent, n.packetsSent, n.packetsLost)
	}
}

func TestLossyNetworkDropsAboutItsShareAndCountsWhatWasSent(t *testing.T) {
	n := network{loss: 0.3, rand: rand.New(rand.NewPCG(1, 1))}
	pkts := make([][]byte, 10)
	for i := range pkts {
		pkts[i] = []byte{byte(i)}
	}
	arrived := 0
	for range 1000 {
		got := n.send(pkts)
		arrived += len(got)
		for i := 1; i < len(got); i++ {
			if got[i][0] <= got[i-1][0] {
				t.Fatalf("packets reordered: %v", got)
			}
		}
	}
	if n.packetsSent != 10000 || n.bytesSent != 10000 {
		t.Errorf("counted %d packets and %d bytes sent, want 10000 each (lost ones included)", n.packetsSent, n.bytesSent)
	}
	if uint64(arrived)+n.packetsLost != n.packetsSent {
		t.Errorf("%d arrived + %d lost != %d sent", arrived, n.packetsLost, n.packetsSent)
	}
	if share := float64(n.packetsLost) / 10000; share < 0.27 || share > 0.33 {
		t.Errorf("lost %.3f of packets, want about 0.3", share)
	}
}
