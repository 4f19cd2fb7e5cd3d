package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// discoveryOf runs the serve command's flag parsing and returns what
// discoveryFrom makes of them.
func discoveryOf(t *testing.T, args ...string) (*discoverySettings, error) {
	t.Helper()
	var s *discoverySettings
	cmd := serveCommand()
	cmd.Action = func(c *cli.Context) (err error) {
		s, err = discoveryFrom(c, slog.Default())
		return err
	}
	app := &cli.App{Name: "router", Commands: []*cli.Command{cmd}}
	err := app.Run(append([]string{"router", "serve"}, args...))
	return s, err
}

func TestDiscoveryFlagsAreCheckedNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--service-discovery"}, "--selector"},
		{[]string{"--service-discovery", "--selector", "app in (vllm"}, "--selector"},
		{[]string{"--service-discovery", "--selector", "app=vllm", "--service-discovery-port", "0"}, "--service-discovery-port"},
		{[]string{"--service-discovery", "--selector", "app=vllm", "--prefill-selector", "role=p"}, "--prefill-selector"},
		{[]string{"--service-discovery", "--vllm-pd-disaggregation", "--prefill-selector", "role=p"}, "--decode-selector"},
	} {
		if _, err := discoveryOf(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%q: %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
	s, err := discoveryOf(t, "--service-discovery", "--pd-disaggregation", "--prefill-selector", "app=vllm",
		"--prefill-selector", "role=prefill", "--decode-selector", "role=decode", "--service-discovery-namespace", "llm")
	if err != nil || len(s.selectors) != 2 || s.selectors[0].Selector.String() != "app=vllm,role=prefill" ||
		s.selectors[1].Role != "decode" || s.namespace != "llm" || s.port != 80 {
		t.Fatalf("settings %+v, %v", s, err)
	}
	if s, err := discoveryOf(t, "--selector", "app=vllm"); s != nil || err != nil {
		t.Fatalf("without --service-discovery: %+v, %v; want it off, as vllm-router has it", s, err)
	}
}

// fakeClusterPods is client-go's fake clientset as a pod source.
type fakeClusterPods struct{ cs *fake.Clientset }

func (f fakeClusterPods) ListPods(ctx context.Context, ns string, o metav1.ListOptions) (*corev1.PodList, error) {
	return f.cs.CoreV1().Pods(ns).List(ctx, o)
}

func (f fakeClusterPods) WatchPods(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
	return f.cs.CoreV1().Pods(ns).Watch(ctx, o)
}

func (f fakeClusterPods) IsWatchListSemanticsUnSupported() bool { return true }

// A pod that becomes ready is registered through the replica's Raft log,
// gets traffic, and is removed when it is deleted.
func TestDiscoveredPodsAreRoutedToThroughTheRegistry(t *testing.T) {
	w := fakeworker.Start(t, "pod-worker")
	host, port, _ := net.SplitHostPort(w.Addr)
	cfg, err := parseServe(t, "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0",
		"--allowed-worker-hosts", "127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	r, err := cluster.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vllm-0", Namespace: "llm", Labels: map[string]string{"app": "vllm"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: host,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	client := fake.NewClientset(p)
	s, err := discoveryOf(t, "--service-discovery", "--selector", "app=vllm", "--service-discovery-namespace", "llm",
		"--service-discovery-port", port)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := runDiscovery(ctx, s, fakeClusterPods{client}, r, cfg.Proxy.WorkerHosts.Allows, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	url := "http://" + r.HTTPAddr()
	testwait.Eventually(t, 20*time.Second, func() bool {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && resp.Header.Get("x-worker-id") == "pod-worker"
	}, "the pod routed to")
	reg := r.RegistryWorkers()
	if len(reg) != 1 || reg[0].URL != "http://"+host+":"+port || reg[0].Labels["pod"] != "llm/vllm-0" {
		t.Fatalf("registry %+v", reg)
	}
	if err := client.CoreV1().Pods("llm").Delete(context.Background(), "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return len(r.RegistryWorkers()) == 0 }, "the deleted pod's worker removed")
}
