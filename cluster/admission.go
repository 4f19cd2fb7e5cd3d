package cluster

import (
	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/loadsync"
)

// The replica's side of admission: the engines' readings that the door
// (core.Door, built by the proxy) judges saturation from, and the queue
// reports that make its fairness tier-wide. Kept apart from the rest of the
// gossip wiring so that it moves as one piece.

// admissionBridge carries readings and queue reports between the engines'
// scraper, the door and the gossip. door is set once the proxy is built, before the
// gossip starts; until then the queues are empty.
type admissionBridge struct {
	engines *health.EngineScraper
	door    *core.Door
}

// engineReadings hands the door the scraper's latest engine readings.
func (b *admissionBridge) engineReadings(dst []admission.Reading) []admission.Reading {
	for _, e := range b.engines.Readings(nil) {
		dst = append(dst, admission.Reading{Worker: uint32(e.ID), At: e.At, Running: e.Running, Waiting: e.Waiting,
			KVUsage: e.KVUsage})
	}
	return dst
}

// localQueues reports the door's queue to the gossip.
func (b *admissionBridge) localQueues(dst []loadsync.QueueDepth) []loadsync.QueueDepth {
	if b.door == nil {
		return dst
	}
	return b.door.LocalQueues(dst)
}

// remoteQueues hands a peer's queue report to the door; nil forgets the
// peer.
func (b *admissionBridge) remoteQueues(origin string, ds []loadsync.QueueDepth) {
	if b.door != nil {
		b.door.RemoteQueues(origin, ds)
	}
}
