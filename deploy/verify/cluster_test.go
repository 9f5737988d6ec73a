package verify

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// raftPort is lcd's default raft port, the mutex port + 4.
const raftPort = 22123

// clusterEnv is the environment of one node of a cluster as a deploy file
// gives it.
type clusterEnv map[string]string

// addressVars are the variables of a cluster node that hold addresses.
var addressVars = []string{"BIND_ADDRESS", "RAFT_ADDRESS", "ADVERTISE_ADDRESS", "RAFT_PEERS"}

// runCluster starts one lcd per env on 127.0.0.1 and waits until every
// node answers /readyz with 200 and exactly one of them leads. Every
// address of the deploy files is moved to a port of 127.0.0.1 that the
// test picks: node(i, host) names the node that host stands for in node
// i's settings (-1 for none), and each (node, port) pair gets a port of
// its own. RAFT_DIR goes to a temporary directory; the management and
// metrics ports to port 0; an HTTP API is turned off.
func runCluster(t *testing.T, envs []clusterEnv, node func(i int, host string) int) {
	t.Helper()
	type place struct{ node, port int }
	ports := map[place]string{}
	move := func(i int, addr string) string {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("node %d: %q: %v", i, addr, err)
		}
		n := node(i, host)
		if n < 0 {
			t.Fatalf("node %d: %q names no node of the cluster", i, addr)
		}
		var p int
		fmt.Sscan(port, &p)
		k := place{n, p}
		if ports[k] == "" {
			ports[k] = fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
		}
		return ports[k]
	}
	var procs []*process
	for i, env := range envs {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		for _, k := range addressVars {
			v, ok := e[k]
			if !ok || v == "" {
				continue
			}
			if k != "RAFT_PEERS" {
				e[k] = move(i, v)
				continue
			}
			var peers []string
			for _, p := range strings.Split(v, ",") {
				parts := strings.Split(p, "=")
				for j := 1; j < len(parts); j++ {
					parts[j] = move(i, parts[j])
				}
				peers = append(peers, strings.Join(parts, "="))
			}
			e[k] = strings.Join(peers, ",")
		}
		if _, ok := e["RAFT_ADDRESS"]; !ok {
			// lcd's default: BIND_ADDRESS's host, port + 4.
			host, port, _ := net.SplitHostPort(env["BIND_ADDRESS"])
			var p int
			fmt.Sscan(port, &p)
			e["RAFT_ADDRESS"] = move(i, net.JoinHostPort(host, fmt.Sprint(p+4)))
		}
		e["RAFT_DIR"] = filepath.Join(t.TempDir(), "raft")
		e["MANAGER_ADDRESS"], e["METRICS_ADDRESS"] = "127.0.0.1:0", "127.0.0.1:0"
		e["HTTP_ADDRESS"] = "" // no HTTP API on a port + 3 nobody picked; an lcd without one ignores it
		var list []string
		for k, v := range e {
			list = append(list, k+"="+v)
		}
		slices.Sort(list)
		procs = append(procs, start(t, []string{lcdPath()}, list, t.TempDir()))
	}
	urls := make([]string, len(procs))
	for i, p := range procs {
		waitUntil(t, p, "the start-up log line", func() error {
			m := startedLine.FindStringSubmatch(p.output.String())
			if m == nil {
				return fmt.Errorf("node %d has not started", i)
			}
			urls[i] = "http://" + m[3] + "/readyz"
			return nil
		})
	}
	waitUntil(t, procs[0], "a leader that every node follows", func() error {
		leaders := 0
		for i, u := range urls {
			body, err := get(u)
			if err != nil {
				return fmt.Errorf("node %d: %v (%s)", i, err, strings.TrimSpace(body))
			}
			if strings.TrimSpace(body) == "leader" {
				leaders++
			}
		}
		if leaders != 1 {
			return fmt.Errorf("%d nodes lead", leaders)
		}
		return nil
	})
}

// readEnvFile parses a systemd environment file: VARIABLE=value lines,
// comments and blank lines.
func readEnvFile(t *testing.T, path string) clusterEnv {
	t.Helper()
	env := clusterEnv{}
	sc := bufio.NewScanner(bytes.NewReader(readRepoFile(t, path)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not VARIABLE=value", path, line)
		}
		env[k] = v
	}
	return env
}

// The three hosts' environment files of deploy/systemd/cluster, read as
// lcd.service reads them (after its own DATA_PATH), form a cluster with
// one leader that every node follows.
func TestSystemdClusterEnvFiles(t *testing.T) {
	var envs []clusterEnv
	hosts := map[string]int{}
	for i := range 3 {
		env := readEnvFile(t, fmt.Sprintf("deploy/systemd/cluster/lc-%d.env", i+1))
		if env["NODE_ID"] != fmt.Sprintf("lc-%d", i+1) {
			t.Errorf("lc-%d.env: NODE_ID %q", i+1, env["NODE_ID"])
		}
		if v, ok := env["DATA_PATH"]; !ok || v != "" {
			t.Errorf("lc-%d.env does not empty the DATA_PATH lcd.service sets", i+1)
		}
		host, _, _ := net.SplitHostPort(env["BIND_ADDRESS"])
		hosts[host] = i
		if i > 0 && env["RAFT_PEERS"] != envs[0]["RAFT_PEERS"] {
			t.Errorf("lc-%d.env's RAFT_PEERS differ from lc-1.env's", i+1)
		}
		env["DATA_PATH"] = "" // lcd.service's Environment= comes first; the file's wins
		envs = append(envs, env)
	}
	if len(hosts) != 3 {
		t.Fatalf("the three env files bind %d distinct hosts", len(hosts))
	}
	runCluster(t, envs, func(_ int, host string) int {
		if i, ok := hosts[host]; ok {
			return i
		}
		return -1
	})
}

// podEnv returns the environment of pod i of the StatefulSet: its
// container's variables in order, $(VAR) expanded from those before it
// and fieldRef values given.
func podEnv(t *testing.T, c *corev1.Container, fields map[string]string) clusterEnv {
	t.Helper()
	env := clusterEnv{}
	var pairs []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				t.Fatalf("%s takes its value from other than a field", e.Name)
			}
			var ok bool
			if v, ok = fields[e.ValueFrom.FieldRef.FieldPath]; !ok {
				t.Fatalf("%s takes %s, which the test does not know", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		v = strings.NewReplacer(pairs...).Replace(v)
		env[e.Name] = v
		pairs = append(pairs, "$("+e.Name+")", v)
	}
	return env
}

func TestKubernetesCluster(t *testing.T) {
	checkCluster(t, loadManifests(t, "locking-center-cluster.yaml"), "locking-center")
}

// checkCluster asserts what a three-node cluster of a StatefulSet must
// be, its client Service named client, and runs the three pods' settings
// as a cluster.
func checkCluster(t *testing.T, m manifests, client string) *corev1.Container {
	t.Helper()
	if len(m.deployments) != 0 || len(m.claims) != 0 {
		t.Error("the cluster manifest has a Deployment or a claim beside its StatefulSet")
	}
	ss := one(t, m.statefulSets, "StatefulSet")
	ports := map[string]int32{"raft": raftPort}
	for k, v := range containerPorts {
		ports[k] = v
	}
	c := checkPod(t, ss.Spec.Selector, ss.Spec.Template, ports,
		map[string]string{"readiness": "/readyz", "liveness": "/healthz"})
	pods := labels.Set(ss.Spec.Template.Labels)
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 3 {
		t.Fatalf("replicas %v, want 3", ss.Spec.Replicas)
	}
	if ss.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("podManagementPolicy %q, want Parallel: no pod is ready before a quorum runs", ss.Spec.PodManagementPolicy)
	}

	if len(m.services) != 2 {
		t.Fatalf("%d Services, want a headless one and one for clients", len(m.services))
	}
	var headless, clients *corev1.Service
	for _, s := range m.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = s
		} else {
			clients = s
		}
	}
	if headless == nil || clients == nil {
		t.Fatal("want one headless Service (clusterIP: None) and one client Service")
	}
	if headless.Name != ss.Spec.ServiceName {
		t.Errorf("serviceName %q, want the headless Service %q", ss.Spec.ServiceName, headless.Name)
	}
	if !headless.Spec.PublishNotReadyAddresses {
		t.Error("the headless Service does not publish pods before they are ready: no pod could find the others to elect a leader")
	}
	if !labels.SelectorFromSet(headless.Spec.Selector).Matches(pods) ||
		!slices.ContainsFunc(headless.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == raftPort }) {
		t.Errorf("the headless Service does not reach the pods' raft port: %v", headless.Spec)
	}
	if clients.Name != client {
		t.Errorf("client Service %q, want %s, the name client-example.yaml dials", clients.Name, client)
	}
	checkService(t, clients, ss.Spec.Template)

	pdb := one(t, m.budgets, "PodDisruptionBudget")
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, minAvailable %v; want maxUnavailable 1 only",
			pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(pods) {
		t.Errorf("the PodDisruptionBudget does not select the pods: %v", err)
	}

	claim := one(t, ss.Spec.VolumeClaimTemplates, "volumeClaimTemplate")
	if !slices.Equal(claim.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("claim access modes %v, want ReadWriteOnce", claim.Spec.AccessModes)
	}
	if q := claim.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("100Mi")) < 0 {
		t.Errorf("claim requests %s of storage", q.String())
	}
	if _, ok := envValue(c, "DATA_PATH"); ok {
		t.Error("a cluster node sets DATA_PATH, which it refuses")
	}
	dir, _ := envValue(c, "RAFT_DIR")
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return vm.Name == claim.Name && strings.HasPrefix(dir, strings.TrimSuffix(vm.MountPath, "/")+"/")
	}) {
		t.Errorf("RAFT_DIR %q is not on the claim %q: the raft log would not outlive the pod", dir, claim.Name)
	}
	if id, _ := envValue(c, "NODE_ID"); id != "$(POD_NAME)" {
		t.Errorf("NODE_ID %q, want the pod's name", id)
	}

	// Run the three pods' settings: the names of the headless Service
	// stand for the pods, and each pod binds its own.
	var envs []clusterEnv
	for i := range 3 {
		envs = append(envs, podEnv(t, c, map[string]string{
			"metadata.name": fmt.Sprintf("%s-%d", ss.Name, i), "metadata.namespace": "default"}))
	}
	if got := envs[2]["NODE_ID"]; got != ss.Name+"-2" {
		t.Errorf("pod 2's NODE_ID is %q", got)
	}
	runCluster(t, envs, func(i int, host string) int {
		if host == "" {
			return i // the pod's own interfaces
		}
		pod, rest, _ := strings.Cut(host, ".")
		if rest != headless.Name && !strings.HasPrefix(rest, headless.Name+".") {
			return -1
		}
		for j := range 3 {
			if pod == fmt.Sprintf("%s-%d", ss.Name, j) {
				return j
			}
		}
		return -1
	})
	return c
}
