package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/urfave/cli/v2"
)

// The Kubernetes manifests of deploy/k8s, read with Kubernetes' own types,
// against the router they deploy: real flags, real endpoints, and names
// that agree with each other.

const k8sDir = "../../deploy/k8s"

// manifests holds the objects of deploy/k8s by kind.
type manifests struct {
	statefulSet *appsv1.StatefulSet
	services    map[string]*corev1.Service
	secrets     map[string]*corev1.Secret
	pdbs        []*policyv1.PodDisruptionBudget
	kinds       []string
}

func readManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", k8sDir, err)
	}
	m := manifests{services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{}}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
			m.add(t, fmt.Sprintf("%s#%d", filepath.Base(f), i), doc)
		}
	}
	if m.statefulSet == nil {
		t.Fatal("no StatefulSet in deploy/k8s")
	}
	return m
}

// add decodes one YAML document strictly into the type of its kind.
func (m *manifests) add(t *testing.T, where string, doc []byte) {
	t.Helper()
	var head struct{ Kind string }
	if err := yaml.Unmarshal(doc, &head); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	m.kinds = append(m.kinds, head.Kind)
	var obj any
	switch head.Kind {
	case "StatefulSet":
		m.statefulSet = &appsv1.StatefulSet{}
		obj = m.statefulSet
	case "Service":
		s := &corev1.Service{}
		defer func() { m.services[s.Name] = s }()
		obj = s
	case "Secret":
		s := &corev1.Secret{}
		defer func() { m.secrets[s.Name] = s }()
		obj = s
	case "PodDisruptionBudget":
		p := &policyv1.PodDisruptionBudget{}
		m.pdbs = append(m.pdbs, p)
		obj = p
	default:
		return
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("%s (%s): %v", where, head.Kind, err)
	}
}

// routerArgs returns the router container and its flags by name (a flag
// given several times keeps every value; a bool flag's value is "true").
func (m manifests) routerArgs(t *testing.T) (corev1.Container, map[string][]string) {
	t.Helper()
	c := m.statefulSet.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("container args %q: want `serve` first", c.Args)
	}
	flags := map[string][]string{}
	for _, a := range c.Args[1:] {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") {
			t.Errorf("arg %q is not a --flag", a)
		}
		if !hasValue {
			value = "true"
		}
		flags[name] = append(flags[name], value)
	}
	return c, flags
}

// serveFlagsByName maps every name and alias of `router serve`'s flags to
// the flag.
func serveFlagsByName() map[string]cli.Flag {
	out := map[string]cli.Flag{}
	for _, f := range serveFlags() {
		for _, n := range f.Names() {
			out[n] = f
		}
	}
	return out
}

func TestTheStatefulSetPassesOnlyRealFlags(t *testing.T) {
	m := readManifests(t)
	c, flags := m.routerArgs(t)
	known := serveFlagsByName()
	for name, values := range flags {
		f, ok := known[name]
		if !ok {
			t.Errorf("--%s is not a flag of `router serve`", name)
			continue
		}
		_, isBool := f.(*cli.BoolFlag)
		if isBool != (values[0] == "true") {
			t.Errorf("--%s=%s: a bool flag takes no value, the others take one", name, values[0])
		}
		if _, isSlice := f.(*cli.StringSliceFlag); len(values) > 1 && !isSlice {
			t.Errorf("--%s given %d times; it takes one value", name, len(values))
		}
	}
	defined := map[string]bool{}
	for _, e := range c.Env {
		defined[e.Name] = true
		if flag, ok := strings.CutPrefix(e.Name, "ROUTER_"); ok {
			name := strings.ToLower(strings.ReplaceAll(flag, "_", "-"))
			if known[name] == nil || !slices.Contains(known[name].(cli.DocGenerationFlag).GetEnvVars(), e.Name) {
				t.Errorf("env %s sets no flag of `router serve`", e.Name)
			}
		}
	}
	for _, a := range c.Args {
		for _, ref := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(a, -1) {
			if !defined[ref[1]] {
				t.Errorf("arg %q refers to $(%s), which the container's env does not define", a, ref[1])
			}
		}
	}
}

// portOf returns the port of a host:port flag value.
func portOf(t *testing.T, flag, hostport string) int32 {
	t.Helper()
	i := strings.LastIndex(hostport, ":")
	n, err := strconv.Atoi(hostport[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("--%s=%s: no port", flag, hostport)
	}
	return int32(n)
}

func TestTheStatefulSetNamesAgree(t *testing.T) {
	m := readManifests(t)
	ss := m.statefulSet
	c, flags := m.routerArgs(t)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	one := func(name string) string {
		if len(flags[name]) != 1 {
			t.Fatalf("--%s: %q, want one value", name, flags[name])
		}
		return flags[name][0]
	}
	for port, flag := range map[string]string{"api": "port", "metrics": "prometheus-port"} {
		if strconv.Itoa(int(ports[port])) != one(flag) {
			t.Errorf("container port %s is %d, --%s is %s", port, ports[port], flag, one(flag))
		}
	}
	if ports["gossip-tcp"] != portOf(t, "gossip-bind", one("gossip-bind")) || ports["cluster"] != portOf(t, "raft-bind", one("raft-bind")) {
		t.Errorf("container ports %v disagree with --gossip-bind %s and --raft-bind %s", ports, one("gossip-bind"), one("raft-bind"))
	}
	replicas := int(*ss.Spec.Replicas)
	if one("bootstrap-expect") != strconv.Itoa(replicas) || one("node-name") != "$(POD_NAME)" {
		t.Errorf("--bootstrap-expect %s, --node-name %s: want the %d replicas as voters, named by their pods",
			one("bootstrap-expect"), one("node-name"), replicas)
	}
	peers := m.services[ss.Spec.ServiceName]
	if peers == nil || peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses {
		t.Fatalf("serviceName %q: want a headless Service that publishes replicas before they are ready", ss.Spec.ServiceName)
	}
	var wantJoin []string
	for i := range replicas {
		wantJoin = append(wantJoin, fmt.Sprintf("%s-%d.%s.$(POD_NAMESPACE).svc.cluster.local:%d", ss.Name, i, peers.Name, ports["gossip-tcp"]))
	}
	if !slices.Equal(flags["join"], wantJoin) {
		t.Errorf("--join %q, want every replica by its stable name %q", flags["join"], wantJoin)
	}
	if want := fmt.Sprintf("$(POD_NAME).%s.$(POD_NAMESPACE).svc.cluster.local:%d", peers.Name, ports["cluster"]); one("raft-advertise") != want {
		t.Errorf("--raft-advertise %s, want %s", one("raft-advertise"), want)
	}
	podLabels := labels.Set(ss.Spec.Template.Labels)
	for name, s := range m.services {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
			t.Errorf("Service %s selects %v, not the replicas %v", name, s.Spec.Selector, podLabels)
		}
		for _, p := range s.Spec.Ports {
			if p.TargetPort.StrVal != "" && ports[p.TargetPort.StrVal] == 0 {
				t.Errorf("Service %s targets port %q, which the container does not name", name, p.TargetPort.StrVal)
			}
		}
	}
	if len(m.pdbs) != 1 || m.pdbs[0].Spec.MaxUnavailable.IntValue() != 1 {
		t.Fatalf("want one PodDisruptionBudget allowing one replica down (a quorum of 3 keeps 2)")
	}
	if sel, err := metav1Selector(m.pdbs[0]); err != nil || !sel.Matches(podLabels) {
		t.Errorf("the PodDisruptionBudget does not select the replicas: %v", err)
	}
	checkDataVolume(t, ss, c, one("data-dir"))
}

// checkDataVolume: --data-dir is the mount of the volume claim template.
func checkDataVolume(t *testing.T, ss *appsv1.StatefulSet, c corev1.Container, dataDir string) {
	t.Helper()
	for _, claim := range ss.Spec.VolumeClaimTemplates {
		for _, vm := range c.VolumeMounts {
			if vm.Name == claim.Name && vm.MountPath == dataDir {
				return
			}
		}
	}
	t.Errorf("--data-dir %s is not the mount of a volume claim template", dataDir)
}

func TestTheStatefulSetReadsTheSecretsItNeeds(t *testing.T) {
	m := readManifests(t)
	ss := m.statefulSet
	c, flags := m.routerArgs(t)
	for _, e := range c.Env {
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			s := m.secrets[ref.SecretKeyRef.Name]
			if s == nil || s.StringData[ref.SecretKeyRef.Key] == "" {
				t.Errorf("env %s reads key %s of Secret %s, which secrets.example.yaml does not have",
					e.Name, ref.SecretKeyRef.Key, ref.SecretKeyRef.Name)
			}
		}
	}
	mounts := map[string]string{} // mount path -> secret
	for _, v := range ss.Spec.Template.Spec.Volumes {
		for _, vm := range c.VolumeMounts {
			if vm.Name == v.Name && v.Secret != nil {
				mounts[vm.MountPath] = v.Secret.SecretName
			}
		}
	}
	for _, flag := range []string{"cluster-tls-ca", "cluster-tls-cert", "cluster-tls-key"} {
		dir, file := filepath.Split(flags[flag][0])
		s := m.secrets[mounts[filepath.Clean(dir)]]
		if s == nil {
			t.Errorf("--%s %s is not in a mounted Secret", flag, flags[flag][0])
			continue
		}
		for i := range int(*ss.Spec.Replicas) {
			key := strings.ReplaceAll(file, "$(POD_NAME)", fmt.Sprintf("%s-%d", ss.Name, i))
			if _, ok := s.StringData[key]; !ok {
				t.Errorf("--%s: Secret %s has no %s", flag, s.Name, key)
			}
		}
	}
	if flags["gossip-key"] == nil && !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "ROUTER_GOSSIP_KEY" }) {
		t.Error("no gossip key: gossip beyond loopback must be encrypted")
	}
}

// The probes ask a real router for paths it answers, on the API port.
func TestTheProbesAskTheRouterForRealEndpoints(t *testing.T) {
	m := readManifests(t)
	c, flags := m.routerArgs(t)
	probes := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe}
	routerBin, workersim := binaries(t)
	_, worker := startWorkersim(t, workersim, "w0")
	router := startRouterProcess(t, routerBin, "--worker-urls", worker)
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s probe by HTTP GET", kind)
			continue
		}
		port := p.HTTPGet.Port.String()
		if named := slices.IndexFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == port }); named >= 0 {
			port = strconv.Itoa(int(c.Ports[named].ContainerPort))
		}
		if port != flags["port"][0] {
			t.Errorf("the %s probe asks port %s, the API is on --port %s", kind, port, flags["port"][0])
		}
		resp, err := http.Get(router + p.HTTPGet.Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the %s probe's %s: %d from a ready router", kind, p.HTTPGet.Path, resp.StatusCode)
		}
	}
}

func metav1Selector(p *policyv1.PodDisruptionBudget) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(p.Spec.Selector)
}
