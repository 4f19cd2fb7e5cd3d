package cluster

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/store"
)

// registerClusterMetrics exports Raft's view of the cluster.
func (r *Replica) registerClusterMetrics() {
	r.metrics.NewGauge("vllm_router_cluster_raft_term", func() float64 { return float64(r.raft.Term()) })
	r.metrics.NewGauge("vllm_router_cluster_raft_leader", func() float64 {
		if r.raft.IsLeader() {
			return 1
		}
		return 0
	})
	r.metrics.NewGauge("vllm_router_cluster_registry_workers", func() float64 { return float64(r.fsm.View().Len()) })
}

// workerGauges keeps one vllm_router_cb_state gauge per registered worker.
type workerGauges struct {
	mu    sync.Mutex
	names map[store.WorkerID]string
}

func (g *workerGauges) sync(set *metrics.Set, workers []store.Worker, m *health.Monitor) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.names == nil {
		g.names = map[store.WorkerID]string{}
	}
	keep := map[store.WorkerID]bool{}
	for _, w := range workers {
		keep[w.ID] = true
		if _, ok := g.names[w.ID]; ok {
			continue
		}
		id := health.WorkerID(w.ID)
		name := fmt.Sprintf(`vllm_router_cb_state{worker=%q}`, w.URL)
		set.GetOrCreateGauge(name, func() float64 {
			st, _ := m.Status(id)
			return float64(st.Circuit)
		})
		g.names[w.ID] = name
	}
	for id, name := range g.names {
		if !keep[id] {
			set.UnregisterMetric(name)
			delete(g.names, id)
		}
	}
}

// serveMetrics answers /metrics on the extra --prometheus-port listener.
func serveMetrics(ctx context.Context, ln net.Listener, set *metrics.Set) {
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		c.SetContentType("text/plain; version=0.0.4")
		set.WritePrometheus(c)
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	<-ctx.Done()
	_ = srv.Shutdown()
	<-done
}
