package discovery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kvrouter/kvrouter/internal/leaktest"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/store"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

const ns = "inference"

// registry is a replica's registry as discovery sees it: a real FSM whose
// writes apply at once, and a leader flag the test flips. Writes made
// while not the leader fail the test.
type registry struct {
	t      *testing.T
	fsm    *store.FSM
	leader atomic.Bool
	writes atomic.Int32
	mu     sync.Mutex
	index  uint64
}

func newRegistry(t *testing.T) *registry {
	r := &registry{t: t, fsm: store.NewFSM()}
	r.leader.Store(true)
	return r
}

func (r *registry) Workers() []store.Worker { return r.fsm.View().Workers() }
func (r *registry) IsLeader() bool          { return r.leader.Load() }

func (r *registry) Apply(_ context.Context, cmd store.Command) (store.Result, error) {
	if !r.leader.Load() {
		r.t.Error("discovery wrote to the registry while not the leader")
	}
	r.writes.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.index++
	data, err := cmd.Encode()
	if err != nil {
		return store.Result{}, err
	}
	res := r.fsm.Apply(&raft.Log{Index: r.index, Type: raft.LogCommand, Data: data}).(store.Result)
	return res, res.Err
}

// urls returns the registered workers as "url role source".
func (r *registry) urls() []string {
	var out []string
	for _, w := range r.Workers() {
		out = append(out, fmt.Sprintf("%s %s %s", w.URL, w.Role, w.Labels[SourceLabel]))
	}
	slices.Sort(out)
	return out
}

func pod(name, ip string, lbls map[string]string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls},
		Status: corev1.PodStatus{Phase: corev1.PodPending, PodIP: ip}}
	setReady(p, ready)
	return p
}

// setReady makes p a running pod that passes its readiness probe, or one
// that fails it.
func setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
}

// fakePods is the fake clientset's pods, saying as the clientset does
// that it cannot stream a watch's initial list.
type fakePods struct{ cs *fake.Clientset }

func (f fakePods) ListPods(ctx context.Context, ns string, o metav1.ListOptions) (*corev1.PodList, error) {
	return f.cs.CoreV1().Pods(ns).List(ctx, o)
}

func (f fakePods) WatchPods(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
	return f.cs.CoreV1().Pods(ns).Watch(ctx, o)
}
func (f fakePods) IsWatchListSemanticsUnSupported() bool {
	return f.cs.IsWatchListSemanticsUnSupported()
}

// watching runs a Watcher over client until the test ends.
func watching(t *testing.T, client *fake.Clientset, reg *registry, cfg Config) *Watcher {
	t.Helper()
	cfg.Pods, cfg.Namespace = fakePods{client}, ns
	if cfg.Port == 0 {
		cfg.Port = 8000
	}
	if cfg.Selectors == nil {
		cfg.Selectors = []RoleSelector{{store.RoleRegular, labels.SelectorFromSet(labels.Set{"app": "vllm"})}}
	}
	w, err := New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, w)
	return w
}

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// runUntilCleanup runs w until the test ends.
func runUntilCleanup(t *testing.T, w *Watcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func waitFor(t *testing.T, reg *registry, want ...string) {
	t.Helper()
	slices.Sort(want)
	if !testwait.Holds(10*time.Second, func() bool { return slices.Equal(reg.urls(), want) }) {
		t.Fatalf("registry %q, want %q", reg.urls(), want)
	}
}

func update(t *testing.T, client *fake.Clientset, p *corev1.Pod) {
	t.Helper()
	if _, err := client.CoreV1().Pods(ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestPodsBecomeWorkersWhenReadyAndStopWhenNot(t *testing.T) {
	vllm := map[string]string{"app": "vllm"}
	a := pod("vllm-a", "127.0.0.11", vllm, true)
	b := pod("vllm-b", "127.0.0.12", vllm, false)
	pending := pod("vllm-c", "127.0.0.14", vllm, true)
	pending.Status.Phase = corev1.PodPending // scheduled, not started
	other := pod("web", "127.0.0.13", map[string]string{"app": "web"}, true)
	client := fake.NewClientset(a, b, other, pending)
	reg := newRegistry(t)
	manual := "http://127.0.0.20:9000"
	if _, err := reg.Apply(context.Background(), store.NewAddWorker(store.AddWorker{URL: manual})); err != nil {
		t.Fatal(err)
	}
	watching(t, client, reg, Config{})
	waitFor(t, reg, "http://127.0.0.11:8000 regular kubernetes", manual+" regular ")

	setReady(b, true)
	update(t, client, b)
	waitFor(t, reg, "http://127.0.0.11:8000 regular kubernetes", "http://127.0.0.12:8000 regular kubernetes", manual+" regular ")

	setReady(a, false) // not ready any more: out, before it is deleted
	update(t, client, a)
	waitFor(t, reg, "http://127.0.0.12:8000 regular kubernetes", manual+" regular ")

	if err := client.CoreV1().Pods(ns).Delete(context.Background(), "vllm-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reg, manual+" regular ") // the worker added by hand stays
	if w, _ := reg.fsm.View().WorkerByURL("http://127.0.0.12:8000"); w.ID != 0 {
		t.Fatalf("the deleted pod's worker is still registered: %+v", w)
	}
}

func TestOnlyTheLeaderWrites(t *testing.T) {
	client := fake.NewClientset(pod("vllm-a", "127.0.0.11", map[string]string{"app": "vllm"}, true))
	reg := newRegistry(t)
	reg.leader.Store(false)
	w := watching(t, client, reg, Config{Interval: time.Hour})
	testwait.Eventually(t, 10*time.Second, w.Synced, "the informers synced")
	w.Reconcile(context.Background())
	if n := reg.writes.Load(); n != 0 || len(reg.urls()) != 0 {
		t.Fatalf("a follower made %d writes: %q", n, reg.urls())
	}
	reg.leader.Store(true) // elected: the next reconcile catches up
	w.Reconcile(context.Background())
	waitFor(t, reg, "http://127.0.0.11:8000 regular kubernetes")
}

func TestRefusedAddressesAreNotRegistered(t *testing.T) {
	vllm := map[string]string{"app": "vllm"}
	client := fake.NewClientset(pod("inside", "127.0.0.11", vllm, true), pod("outside", "127.0.0.99", vllm, true))
	policy, err := workerurl.ParseHostPolicy([]string{"127.0.0.0/28"})
	if err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t)
	watching(t, client, reg, Config{AllowWorker: policy.Allows})
	waitFor(t, reg, "http://127.0.0.11:8000 regular kubernetes")
}

func TestPrefillAndDecodeSelectorsGiveRoles(t *testing.T) {
	client := fake.NewClientset(
		pod("p", "127.0.0.11", map[string]string{"app": "vllm", "role": "prefill"}, true),
		pod("d", "127.0.0.12", map[string]string{"app": "vllm", "role": "decode"}, true))
	reg := newRegistry(t)
	sel := func(role string) labels.Selector { return labels.SelectorFromSet(labels.Set{"role": role}) }
	watching(t, client, reg, Config{Port: 8100, Selectors: []RoleSelector{
		{store.RolePrefill, sel("prefill")}, {store.RoleDecode, sel("decode")}}})
	waitFor(t, reg, "http://127.0.0.11:8100 prefill kubernetes", "http://127.0.0.12:8100 decode kubernetes")
}

func TestNewRefusesAConfigNamingTheFlag(t *testing.T) {
	client := fake.NewClientset()
	for _, tc := range []struct {
		cfg  Config
		flag string
	}{
		{Config{Pods: fakePods{client}, Port: 80}, "--selector"},
		{Config{Pods: fakePods{client}, Port: 0, Selectors: []RoleSelector{{store.RoleRegular, labels.Everything()}}}, "--service-discovery-port"},
	} {
		if _, err := New(tc.cfg, newRegistry(t)); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.flag)
		}
	}
}
