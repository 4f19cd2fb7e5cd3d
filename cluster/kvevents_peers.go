package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/store"
)

// How the replicas share what they hear of the engines: the relay rides
// the gossip as a channel of its own (each batch an engine publishes to
// this replica goes to every peer within a gossip tick), and a replica that
// starts, or that missed a relayed batch, asks a peer for its snapshot of
// the workers' sets over the cluster port.

// kvSnapshotPath is the cluster port's route of those snapshots: the body
// lists worker ids (uvarints), the answer is kvevents.AppendSnapshots of
// the trusted views among them.
const kvSnapshotPath = "/cluster/kv-snapshots"

// maxSnapshotAnswer bounds one snapshot answer read from a peer; a fetch
// asks for as many workers at a time as fit.
const maxSnapshotAnswer = 64 << 20

// relayChannel carries the hub's relay on the gossip.
type relayChannel struct{ hub *kvevents.Hub }

var _ loadsync.Channel = relayChannel{}

func (c relayChannel) Type() byte                              { return kvevents.RelayType }
func (c relayChannel) Outbox(now time.Time) [][]byte           { return c.hub.Outbox(now) }
func (c relayChannel) Receive(pkt []byte, now time.Time) error { return c.hub.Receive(pkt, now) }

// gossipChannels are the gossip channels of a replica: the relay of the
// engines' events (--kv-events, kv not nil) and the adapters' residency
// (--lora-residency, when the core has its channel), each when it is on.
func gossipChannels(kv *kvHub, c *core.Replica) []loadsync.Channel {
	var cs []loadsync.Channel
	if kv != nil {
		cs = append(cs, relayChannel{kv.hub})
	}
	if ac := c.AdapterChannel(); ac != nil {
		cs = append(cs, ac)
	}
	return cs
}

// channelTypes are the message types of gossipChannels, announced to the
// peers (known from the config alone: they go into the core's gossip
// config before the core is built).
func (c Config) channelTypes() []byte {
	var types []byte
	if c.KVEvents.Enabled {
		types = append(types, kvevents.RelayType)
	}
	if c.LoRA.Residency {
		types = append(types, core.AdapterReportType)
	}
	return types
}

// snapshotFetcher asks the peers for their snapshots of the workers' sets
// over the cluster port, finding each peer's port in the gossip.
type snapshotFetcher struct {
	gossip    *replicaGossip
	rpc       *link.Client
	maxBlocks int // --kv-events-max-blocks: what one worker's snapshot may hold
}

// fetch asks peer origin for its snapshots of workers, as many at a time
// as an answer may hold.
func (f *snapshotFetcher) fetch(ctx context.Context, origin string, workers []uint32) (map[uint32]kvevents.Snapshot, error) {
	addr := f.gossip.peerRPCAddr(origin)
	if addr == "" {
		return nil, fmt.Errorf("peer %s is not a live member with a cluster port", origin)
	}
	maxBlocks := f.maxBlocks
	perWorker := 64 + 12*maxBlocks
	step := max(1, maxSnapshotAnswer/perWorker)
	out := map[uint32]kvevents.Snapshot{}
	for len(workers) > 0 {
		n := min(step, len(workers))
		got, err := f.fetchSome(ctx, addr, workers[:n], maxBlocks)
		if err != nil {
			return out, err
		}
		for id, s := range got {
			out[id] = s
		}
		workers = workers[n:]
	}
	return out, nil
}

func (f *snapshotFetcher) fetchSome(ctx context.Context, addr string, workers []uint32, maxBlocks int) (map[uint32]kvevents.Snapshot, error) {
	var body []byte
	for _, id := range workers {
		body = binary.AppendUvarint(body, uint64(id))
	}
	status, data, err := f.rpc.CallUpTo(ctx, http.MethodPost, addr, kvSnapshotPath, body, maxSnapshotAnswer)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("answered %d", status)
	}
	return kvevents.DecodeSnapshots(data, len(workers), maxBlocks)
}

// maxSnapshotAsk bounds the workers one ask names.
const maxSnapshotAsk = 1 << 16

// serveSnapshots is kvSnapshotPath: this replica's trusted views of the
// workers a peer asks for.
func (h *kvHub) serveSnapshots(ctx *fasthttp.RequestCtx) {
	ids, err := decodeWorkerIDs(ctx.PostBody())
	if err != nil {
		admin.WriteError(ctx, admin.Refusal(http.StatusBadRequest, "invalid_request_error", err.Error()))
		return
	}
	ctx.SetContentType("application/octet-stream")
	ctx.SetBody(kvevents.AppendSnapshots(nil, h.hub.Snapshots(ids)))
}

func decodeWorkerIDs(b []byte) ([]uint32, error) {
	var ids []uint32
	for len(b) > 0 {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 1<<32-1 {
			return nil, errors.New("the body is not a list of worker ids")
		}
		if len(ids) == maxSnapshotAsk {
			return nil, fmt.Errorf("more than %d worker ids", maxSnapshotAsk)
		}
		ids = append(ids, uint32(v))
		b = b[n:]
	}
	return ids, nil
}

// kvReadings is how often the engines' readings reach the hub, for its
// judgement of an engine busy and silent.
const kvReadings = time.Second

// followEngines hands the hub the engines' requests running, as the
// monitor's scraper reads them, until ctx ends.
func (h *kvHub) followEngines(ctx context.Context, clk clock.WithTicker, engines *health.EngineScraper) {
	t := clk.NewTicker(kvReadings)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			h.engineRunning(func() map[store.WorkerID]float64 { return runningReadings(clk.Now(), engines) })
		}
	}
}

// runningReadings are the engines' latest readings of requests running,
// those read within the last few seconds of now.
func runningReadings(now time.Time, engines *health.EngineScraper) map[store.WorkerID]float64 {
	out := map[store.WorkerID]float64{}
	for _, e := range engines.Readings(nil) {
		if now.Sub(e.At) < 5*kvReadings {
			out[store.WorkerID(e.ID)] = e.Running
		}
	}
	return out
}
