package discovery

import (
	"context"
	"maps"

	"github.com/kvrouter/kvrouter/store"
)

// Reconcile makes the registry's discovered workers the ready pods, when
// this replica is the leader (elsewhere it does nothing). Writes that fail
// are logged and tried again at the next reconcile.
func (w *Watcher) Reconcile(ctx context.Context) {
	if !w.reg.IsLeader() || !w.Synced() {
		return
	}
	want := w.desired()
	byURL := map[string]store.Worker{}
	for _, wk := range w.reg.Workers() {
		byURL[wk.URL] = wk
	}
	for url, wk := range byURL {
		d, wanted := want[url]
		if ours(wk) && (!wanted || d.role != wk.Role) {
			w.remove(ctx, wk)
			delete(byURL, url)
		}
	}
	for url, d := range want {
		if _, registered := byURL[url]; !registered && w.allowed(d) {
			w.add(ctx, d)
		}
	}
}

// ours reports whether discovery added wk.
func ours(wk store.Worker) bool { return wk.Labels[SourceLabel] == SourceKubernetes }

// allowed applies the destination rules, logging a refused pod once.
func (w *Watcher) allowed(d discovered) bool {
	if _, err := store.NormalizeURL(d.url); err != nil {
		return w.refuse(d, err)
	}
	if w.cfg.AllowWorker == nil {
		return true
	}
	if err := w.cfg.AllowWorker(d.url); err != nil {
		return w.refuse(d, err)
	}
	return true
}

func (w *Watcher) refuse(d discovered, err error) bool {
	w.mu.Lock()
	first := !w.refused[d.url]
	w.refused[d.url] = true
	w.mu.Unlock()
	if first {
		w.log.Warn("a discovered pod is not registered: its address is refused", "pod", d.pod, "url", d.url, "err", err)
	}
	return false
}

func (w *Watcher) add(ctx context.Context, d discovered) {
	labels := map[string]string{SourceLabel: SourceKubernetes, PodLabel: d.pod}
	if _, err := w.apply(ctx, store.NewAddWorker(store.AddWorker{URL: d.url, Role: d.role, Labels: maps.Clone(labels)})); err != nil {
		w.log.Warn("registering a discovered pod failed; trying again", "pod", d.pod, "url", d.url, "err", err)
		return
	}
	w.log.Info("registered a discovered pod", "pod", d.pod, "url", d.url, "role", d.role)
}

func (w *Watcher) remove(ctx context.Context, wk store.Worker) {
	if _, err := w.apply(ctx, store.NewRemoveWorker(wk.ID)); err != nil {
		w.log.Warn("removing a pod's worker failed; trying again", "pod", wk.Labels[PodLabel], "url", wk.URL, "err", err)
		return
	}
	w.log.Info("removed the worker of a pod no longer ready", "pod", wk.Labels[PodLabel], "url", wk.URL, "worker", wk.ID)
}

func (w *Watcher) apply(ctx context.Context, cmd store.Command) (store.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.ApplyTimeout)
	defer cancel()
	return w.reg.Apply(ctx, cmd)
}
