package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/exposition"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/store"
)

// clusterFamilies are the metric families a replica writes at scrape time
// from Raft, the registry, the gossip, the monitor and the core, read from
// their single sources rather than copied into metric objects. Its fields
// are set once the parts are built, before register.
type clusterFamilies struct {
	ctx     context.Context
	raft    *raftnode.Node
	fsm     *store.FSM
	monitor *health.Monitor
	sync    *loadsync.State
	core    *core.Replica
	index   *affinity.Index
	gossip  func() *loadsync.Gossip
	loaded  func() bool
}

// register exports Raft's and the gossip's view of the cluster.
func (f clusterFamilies) register(set *metrics.Set) {
	registerRuntime(set)
	set.RegisterMetricsWriter(f.writeGossipMetrics)
	set.NewGauge("vllm_router_cluster_raft_term", func() float64 { return float64(f.raft.Term()) })
	set.NewGauge("vllm_router_cluster_raft_leader", func() float64 {
		if f.raft.IsLeader() {
			return 1
		}
		return 0
	})
	set.NewGauge("vllm_router_cluster_registry_workers", func() float64 { return float64(f.fsm.View().Len()) })
	set.NewGauge("vllm_router_cluster_registry_loaded", func() float64 { return boolGauge(f.loaded()) })
	set.NewGauge("vllm_router_cluster_registry_halted", func() float64 { return boolGauge(f.fsm.Halted() != nil) })
	set.RegisterMetricsWriter(f.writeVoters)
	set.RegisterMetricsWriter(func(w io.Writer) {
		metrics.WriteCounterUint64(w, "vllm_router_cluster_link_refusals_total", f.raft.Port().Refused())
	})
	set.RegisterMetricsWriter(f.writeCircuitTransitions)
	set.RegisterMetricsWriter(f.writeAttribution)
	set.RegisterMetricsWriter(f.writeHoldsEnded)
}

// writeHoldsEnded writes how the placer's holds for its peers' questions
// ended: by the asker's load report, or by the bound when no report said so.
func (f clusterFamilies) writeHoldsEnded(w io.Writer) {
	const family = "vllm_router_cluster_placer_holds_ended_total"
	byReport, byBound := f.core.HoldsEnded()
	metrics.WriteMetadataIfNeeded(w, family, "counter")
	fmt.Fprintf(w, "%s{by=\"report\"} %d\n%s{by=\"bound\"} %d\n", family, byReport, family, byBound)
}

// writeCircuitTransitions writes, per registered worker, how often its
// circuit moved into each state.
func (f clusterFamilies) writeCircuitTransitions(w io.Writer) {
	const family = "vllm_router_cb_state_transitions_total"
	typed := false
	for _, wk := range f.fsm.View().Workers() {
		st, ok := f.monitor.Status(health.WorkerID(wk.ID))
		if !ok {
			continue
		}
		if !typed {
			metrics.WriteMetadataIfNeeded(w, family, "counter")
			typed = true
		}
		for state, n := range st.CircuitTransitions {
			fmt.Fprintf(w, "%s{worker=%q,to=%q} %d\n", family, wk.URL, health.CircuitState(state).String(), n)
		}
	}
}

// writePerOrigin writes one gauge family with a sample per peer replica:
// one TYPE line, then the samples together, as the text format wants
// (a strict scraper refuses a family typed twice or split).
func writePerOrigin(w io.Writer, family string, origins []loadsync.OriginStatus, value func(loadsync.OriginStatus) float64) {
	if len(origins) == 0 {
		return
	}
	metrics.WriteMetadataIfNeeded(w, family, "gauge")
	for _, o := range origins {
		fmt.Fprintf(w, "%s{origin=%q} %g\n", family, o.Origin, value(o))
	}
}

// writeGossipMetrics writes the gossip's counters and per-peer freshness at
// scrape time, read from their single source rather than copied into
// metric objects. Peer names label the lag gauges: the label's values are
// bounded by the number of replicas.
func (f clusterFamilies) writeGossipMetrics(w io.Writer) {
	if f.gossip() == nil {
		return
	}
	st := f.gossip().Stats()
	metrics.WriteGaugeUint64(w, "vllm_router_cluster_members", uint64(len(f.gossip().Members())))
	for _, c := range []struct {
		name  string
		value uint64
	}{
		{"vllm_router_cluster_gossip_sent_bytes_total", st.BytesSent},
		{"vllm_router_cluster_gossip_received_bytes_total", st.BytesReceived},
		{"vllm_router_cluster_gossip_sent_messages_total", st.PacketsSent},
		{"vllm_router_cluster_gossip_received_messages_total", st.PacketsReceived},
		{"vllm_router_cluster_gossip_state_sent_bytes_total", st.StateBytesSent},
		{"vllm_router_cluster_gossip_state_received_bytes_total", st.StateBytesReceived},
		{"vllm_router_cluster_gossip_send_errors_total", st.SendErrors},
		{"vllm_router_cluster_gossip_inbox_dropped_total", st.InboxDropped},
		{"vllm_router_cluster_gossip_decode_errors_total", st.DecodeErrors},
		{"vllm_router_cluster_gossip_unknown_messages_total", st.UnknownMessages},
		{"vllm_router_cluster_gossip_join_refusals_total", st.JoinRefusals},
		{"vllm_router_cluster_gossip_stale_reports_total", st.ReportsStale},
		{"vllm_router_cluster_gossip_full_reports_sent_total", st.FullReportsSent},
		{"vllm_router_cluster_gossip_inexact_deltas_total", st.DeltasInexact},
		{"vllm_router_cluster_gossip_facts_sent_total", st.FactsSent},
		{"vllm_router_cluster_gossip_facts_learned_total", st.FactsLearned},
		{"vllm_router_cluster_gossip_facts_dropped_total", st.FactsDropped},
	} {
		metrics.WriteCounterUint64(w, c.name, c.value)
	}
	lag := f.sync.Lag()
	metrics.WriteGaugeFloat64(w, "vllm_router_cluster_gossip_lag_p50_seconds", lag.P50.Seconds())
	metrics.WriteGaugeFloat64(w, "vllm_router_cluster_gossip_lag_p99_seconds", lag.P99.Seconds())
	origins := f.sync.Origins(time.Now())
	writePerOrigin(w, "vllm_router_cluster_gossip_lag_seconds", origins,
		func(o loadsync.OriginStatus) float64 { return o.LastLag.Seconds() })
	writePerOrigin(w, "vllm_router_cluster_gossip_report_age_seconds", origins,
		func(o loadsync.OriginStatus) float64 { return o.Age.Seconds() })
}

// writeVoters writes how many voters the latest Raft configuration holds,
// to compare with the live members; nothing when Raft does not answer
// within a second (the scrape goes on without it).
func (f clusterFamilies) writeVoters(w io.Writer) {
	ctx, cancel := context.WithTimeout(f.ctx, time.Second)
	defer cancel()
	servers, err := f.raft.Servers(ctx)
	if err != nil {
		return
	}
	voters := 0
	for _, s := range servers {
		if s.Suffrage == "voter" {
			voters++
		}
	}
	metrics.WriteGaugeUint64(w, "vllm_router_cluster_raft_voters", uint64(voters))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// workerGauges keeps the vllm_router_cb_state, vllm_router_worker_wedged
// and vllm_router_worker_degraded gauges of every registered worker.
type workerGauges struct {
	mu    sync.Mutex
	names map[store.WorkerID][]string
}

func (g *workerGauges) sync(set *metrics.Set, workers []store.Worker, m *health.Monitor) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.names == nil {
		g.names = map[store.WorkerID][]string{}
	}
	keep := map[store.WorkerID]bool{}
	for _, w := range workers {
		keep[w.ID] = true
		if _, ok := g.names[w.ID]; ok {
			continue
		}
		id := health.WorkerID(w.ID)
		status := func() health.WorkerStatus { st, _ := m.Status(id); return st }
		for family, value := range map[string]func() float64{
			"vllm_router_cb_state":        func() float64 { return float64(status().Circuit) },
			"vllm_router_worker_wedged":   func() float64 { return boolGauge(status().Wedged) },
			"vllm_router_worker_degraded": func() float64 { return boolGauge(status().Degraded) },
		} {
			name := fmt.Sprintf(`%s{worker=%q}`, family, w.URL)
			set.GetOrCreateGauge(name, value)
			g.names[w.ID] = append(g.names[w.ID], name)
		}
	}
	for id, names := range g.names {
		if !keep[id] {
			for _, name := range names {
				set.UnregisterMetric(name)
			}
			delete(g.names, id)
		}
	}
}

// serveMetrics answers /metrics on the extra --prometheus-port listener.
func serveMetrics(ctx context.Context, ln net.Listener, set *metrics.Set) {
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		c.SetContentType("text/plain; version=0.0.4")
		exposition.Write(c, set)
	}}
	link.ServeUntil(ctx, srv, ln)
}
