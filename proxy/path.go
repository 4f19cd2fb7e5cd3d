package proxy

import (
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/proxy/admit"
	"github.com/kvrouter/kvrouter/proxy/identity"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
)

// requestPath is what every exchange is served with: the proxy's
// collaborators on the request path, each of one concern, built once by New
// and shared by every exchange (exchange.path). It has no methods: an
// exchange asks the collaborator it needs, never the proxy.
type requestPath struct {
	send      *sender         // attempts and retries (retry.go, attempt.go, answer.go)
	legs      *routing        // the routers, the pools of workers, the legs over them (routers.go)
	rec       *recorder       // the metrics, request log and trace of every exchange (recorder.go)
	hooks     *hooks          // the features that join an inference exchange, in order (hooks.go)
	owned     *ownership      // the owners of stored responses (stored.go), a hook too
	streams   *streaming      // the relay of streams and their migration (relay.go, migrate.go)
	admission *admit.Admitter // whose slot an exchange releases in finish
	watcher   *watcher        // the clients of requests in flight (clientwatch.go)
	flights   *flights        // the exchanges in flight, which shutdown aborts (abort.go)
	cors      *corsPolicy     // the CORS headers of every answer (cors.go)
	headers   upstreamHeaders // what of the client's headers the workers are sent
	ready     readyGate       // holds the requests that come before the registry
	timeout   time.Duration   // Config.RequestTimeout: an exchange's deadline from its start
}

// newRequestPath builds the request path of p, whose fleet, worker calls
// and life are made, over the request-path metrics m and the API's keys.
func newRequestPath(p *Proxy, m *pathmetrics.Metrics, keys *identity.Keys) (*requestPath, error) {
	cfg, deps := p.cfg, p.deps
	path := &requestPath{rec: &recorder{metrics: m, log: p.log, tracer: deps.Tracer, idHeaders: cfg.RequestIDHeaders},
		watcher: newWatcher(), flights: &flights{}, cors: &corsPolicy{origins: cfg.CORSOrigins},
		headers: newUpstreamHeaders(deps.Tracer != nil, keys, cfg.APIKey), ready: readyGate{ready: deps.Ready, life: p.ctx},
		timeout: cfg.RequestTimeout}
	var err error
	if path.admission, err = admit.New(cfg.Admission, deps.Loads, deps.Engines, pathmetrics.NewAdmission(deps.Metrics), path.watcher); err != nil {
		return nil, err
	}
	path.send = &sender{fleet: p.fleet, health: deps.Health, metrics: m, retry: cfg.Retry, maxResponse: cfg.MaxResponseSize}
	path.legs = &routing{fleet: p.fleet, loads: deps.Loads, decider: deps.Decider, attempts: cfg.Retry.MaxAttempts,
		adapters: newAdapterLoads(cfg.LoRA, p.calls, p.log, deps.Metrics), pd: deps.PD != nil}
	path.legs.routers.Store(&routerSet{regular: deps.Router, pd: deps.PD})
	path.streams = &streaming{writeTimeout: cfg.Edge.WriteTimeout, migration: cfg.Migration,
		splices: &spliceBudget{limit: cfg.Migration.TotalBytes}, metrics: m, log: p.log}
	path.owned = newOwnership(cfg.StoredResponseOwnerBytes, deps.OwnerSecrets, p.calls, path.legs.finalRole, deps.Metrics)
	path.hooks = newHooks(inferenceHooks(path, p.tokens, deps.PD, &p.wg)...)
	return path, nil
}

// inferenceHooks are the hooks of the inference exchanges, in the order
// they are asked: P/D first (it plans the legs of the endpoints that
// disaggregate, before a continued response is looked for, as it always
// was), then the stored responses' owners, then the prompt's tokens, which
// attach to whatever leg was planned. wg is the proxy's, which shutdown
// waits on.
func inferenceHooks(path *requestPath, tokens *tokenizer, pd *PD, wg *sync.WaitGroup) []any {
	var all []any
	if pd != nil {
		all = append(all, newDisaggregation(*pd, path.legs, path.send, path.flights, wg, path.rec.metrics))
	}
	all = append(all, path.owned)
	if path.admission.Preempts() {
		all = append(all, &preemption{flights: path.flights, metrics: path.rec.metrics.Preemptions})
	}
	if tokens != nil {
		all = append(all, tokens)
	}
	return all
}
