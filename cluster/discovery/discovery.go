package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kvrouter/kvrouter/store"
)

// Source labels the registry entries discovery owns: it adds and removes
// only workers whose Labels[SourceLabel] is SourceKubernetes.
const (
	SourceLabel      = "source"
	SourceKubernetes = "kubernetes"
	PodLabel         = "pod" // namespace/name of the pod a worker is
)

// DefaultInterval is Config.Interval when unset.
const DefaultInterval = 5 * time.Second

// DefaultPort is the workers' port the command line discovers them at
// (--service-discovery-port), vllm-router's default; Config.Port has none.
const DefaultPort = 80

// RoleSelector picks the pods of one worker role.
type RoleSelector struct {
	Role     store.Role
	Selector labels.Selector
}

// Registry is what discovery needs of a replica.
type Registry interface {
	// Workers returns the registry's workers now.
	Workers() []store.Worker
	// IsLeader reports whether this replica is the Raft leader: only the
	// leader applies discovery's writes.
	IsLeader() bool
	// Apply submits a registry write.
	Apply(ctx context.Context, cmd store.Command) (store.Result, error)
}

// Config says which pods are workers.
type Config struct {
	// Pods lists and watches pods (NewAPIServerSource; client-go's fake
	// clientset in tests). Required.
	Pods PodSource
	// Namespace is the one namespace watched (--service-discovery-namespace).
	Namespace string
	// Selectors are the label selectors, one per role (--selector, or
	// --prefill-selector and --decode-selector). At least one.
	Selectors []RoleSelector
	// Port is the workers' port on their pod IP (--service-discovery-port).
	Port int
	// AllowWorker vets a worker URL (--allowed-worker-hosts); nil allows any.
	AllowWorker func(url string) error
	// Interval is how often the leader compares pods and registry even
	// without a pod event (after a leader change, a failed write); default
	// 5 s.
	Interval time.Duration
	// ApplyTimeout bounds each write; default 10 s.
	ApplyTimeout time.Duration
	Logger       *slog.Logger
}

// Watcher watches the pods and keeps the registry in step. Run it once.
type Watcher struct {
	cfg       Config
	reg       Registry
	informers []roleInformer
	kick      chan struct{}
	log       *slog.Logger

	mu      sync.Mutex
	refused map[string]bool // URLs refused once, not logged again
}

type roleInformer struct {
	role     store.Role
	informer cache.SharedIndexInformer
}

// New checks cfg and returns a Watcher.
func New(cfg Config, reg Registry) (*Watcher, error) {
	switch {
	case cfg.Pods == nil:
		return nil, errors.New("discovery: no Kubernetes client")
	case len(cfg.Selectors) == 0:
		return nil, errors.New("--selector: --service-discovery needs a label selector of worker pods (or --prefill-selector and --decode-selector)")
	case cfg.Port < 1 || cfg.Port > 65535:
		return nil, fmt.Errorf("--service-discovery-port: %d is not a port", cfg.Port)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.ApplyTimeout <= 0 {
		cfg.ApplyTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watcher{cfg: cfg, reg: reg, kick: make(chan struct{}, 1), refused: map[string]bool{},
		log: cfg.Logger.With("component", "discovery", "namespace", cfg.Namespace)}
	for _, s := range cfg.Selectors {
		w.informers = append(w.informers, roleInformer{s.Role, w.newInformer(s.Selector)})
	}
	return w, nil
}

// newInformer watches the pods of the namespace that match sel.
func (w *Watcher) newInformer(sel labels.Selector) cache.SharedIndexInformer {
	pods, ns := w.cfg.Pods, w.cfg.Namespace
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel.String()
			return pods.ListPods(ctx, ns, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel.String()
			return pods.WatchPods(ctx, ns, o)
		},
	}
	// A client that says it cannot stream the initial list (client-go's
	// fake) is listed and then watched instead.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, w.cfg.Pods), &corev1.Pod{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.poke() },
		UpdateFunc: func(any, any) { w.poke() },
		DeleteFunc: func(any) { w.poke() },
	})
	return inf
}

// poke asks the loop for a reconcile; pokes coalesce, and never block an
// informer's delivery.
func (w *Watcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run watches until ctx ends; the informers' goroutines have ended when it
// returns. An API server that cannot be listed is retried by the informers
// (and logged by client-go) until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, ri := range w.informers {
		wg.Go(func() { ri.informer.RunWithContext(ctx) })
	}
	defer wg.Wait()
	for _, ri := range w.informers {
		if !cache.WaitForCacheSync(ctx.Done(), ri.informer.HasSynced) {
			return nil // stopped before the first list came
		}
	}
	w.log.Info("watching worker pods", "selectors", w.describeSelectors(), "port", w.cfg.Port)
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	for {
		w.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-w.kick:
		case <-tick.C:
		}
	}
}

func (w *Watcher) describeSelectors() []string {
	var out []string
	for _, s := range w.cfg.Selectors {
		out = append(out, string(s.Role)+": "+s.Selector.String())
	}
	return out
}

// Synced reports whether every informer has listed the pods once.
func (w *Watcher) Synced() bool {
	for _, ri := range w.informers {
		if !ri.informer.HasSynced() {
			return false
		}
	}
	return true
}

// discovered is a ready pod as a worker.
type discovered struct {
	url  string
	role store.Role
	pod  string // namespace/name
}

// desired lists the ready pods of every role, by URL; a pod that two
// selectors match keeps the first role.
func (w *Watcher) desired() map[string]discovered {
	out := map[string]discovered{}
	for _, ri := range w.informers {
		for _, obj := range ri.informer.GetStore().List() {
			pod, ok := obj.(*corev1.Pod)
			if !ok || !serving(pod) {
				continue
			}
			url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(w.cfg.Port))
			if _, seen := out[url]; !seen {
				out[url] = discovered{url: url, role: ri.role, pod: pod.Namespace + "/" + pod.Name}
			}
		}
	}
	return out
}

// serving reports whether pod should get traffic: running, ready, with an
// address, and not on its way out.
func serving(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
