package verify

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Facts of the server the manifests must agree with.
const (
	shutdownTimeoutSeconds = 30    // lcd's default SHUTDOWN_TIMEOUT: the metrics drain after SIGTERM
	serviceUID             = 22119 // uid and gid of the image
)

// containerPorts are lcd's ports by the names the manifests give them.
var containerPorts = map[string]int32{"mutex": 22119, "manager": 22120, "metrics": 22121, "http": 22122}

// manifests is one YAML file decoded into API types.
type manifests struct {
	deployments     []*appsv1.Deployment
	statefulSets    []*appsv1.StatefulSet
	services        []*corev1.Service
	claims          []*corev1.PersistentVolumeClaim
	budgets         []*policyv1.PodDisruptionBudget
	serviceMonitors []*serviceMonitor
}

// serviceMonitor is what the tests read of a Prometheus Operator
// ServiceMonitor.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port      string         `json:"port"`
			Path      string         `json:"path"`
			Interval  string         `json:"interval"`
			Scheme    string         `json:"scheme"`
			TLSConfig map[string]any `json:"tlsConfig"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// loadManifests decodes every document of deploy/kubernetes/name strictly:
// an unknown field or kind fails t.
func loadManifests(t *testing.T, name string) manifests {
	t.Helper()
	return decodeManifests(t, name, readRepoFile(t, "deploy/kubernetes/"+name))
}

// decodeManifests decodes every document of data, named name in
// failures, strictly.
func decodeManifests(t *testing.T, name string, data []byte) manifests {
	t.Helper()
	var m manifests
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tm.Kind == "" {
			continue // a document of comments only
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			d := new(appsv1.Deployment)
			m.deployments, obj = append(m.deployments, d), d
		case "apps/v1 StatefulSet":
			d := new(appsv1.StatefulSet)
			m.statefulSets, obj = append(m.statefulSets, d), d
		case "policy/v1 PodDisruptionBudget":
			b := new(policyv1.PodDisruptionBudget)
			m.budgets, obj = append(m.budgets, b), b
		case "v1 Service":
			s := new(corev1.Service)
			m.services, obj = append(m.services, s), s
		case "v1 PersistentVolumeClaim":
			c := new(corev1.PersistentVolumeClaim)
			m.claims, obj = append(m.claims, c), c
		case "monitoring.coreos.com/v1 ServiceMonitor":
			sm := new(serviceMonitor)
			m.serviceMonitors, obj = append(m.serviceMonitors, sm), sm
		default:
			t.Fatalf("%s: unexpected %s %s", name, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s: %s: %v", name, tm.Kind, err)
		}
	}
	return m
}

// one returns the single element of s, failing t otherwise.
func one[T any](t *testing.T, s []T, what string) T {
	t.Helper()
	if len(s) != 1 {
		t.Fatalf("want exactly one %s, found %d", what, len(s))
	}
	return s[0]
}

// checkServer asserts what every lcd Deployment must be, and returns its
// lcd container.
func checkServer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want exactly 1: a second replica is a second lock table", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q, want Recreate: two pods must never run at once", d.Spec.Strategy.Type)
	}
	return checkPod(t, d.Spec.Selector, d.Spec.Template, containerPorts,
		map[string]string{"readiness": "/metrics", "liveness": "/metrics"})
}

// checkPod asserts what every lcd pod template must be: selected by sel,
// a grace period above the shutdown drain, the image's user, one
// container with ports and probes (kind -> path on the metrics port) as
// given, and no privileges. It returns the container.
func checkPod(t *testing.T, sel *metav1.LabelSelector, tmpl corev1.PodTemplateSpec, ports map[string]int32,
	probes map[string]string) *corev1.Container {
	t.Helper()
	pod := tmpl.Spec
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= shutdownTimeoutSeconds {
		t.Errorf("terminationGracePeriodSeconds %v, want above the %d s shutdown drain", g, shutdownTimeoutSeconds)
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() || !s.Matches(labels.Set(tmpl.Labels)) {
		t.Errorf("selector %v does not match the pod labels %v", sel, tmpl.Labels)
	}

	psc := pod.SecurityContext
	if psc == nil {
		t.Fatal("pod has no securityContext")
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("runAsNonRoot is not true")
	}
	for what, id := range map[string]*int64{"runAsUser": psc.RunAsUser, "runAsGroup": psc.RunAsGroup, "fsGroup": psc.FSGroup} {
		if id == nil || *id != serviceUID {
			t.Errorf("%s %v, want %d", what, id, serviceUID)
		}
	}

	c := one(t, pod.Containers, "container")
	if c.Image != defaultImage(t)+":latest" {
		t.Errorf("image %q, want %s:latest as create_image.sh tags it", c.Image, defaultImage(t))
	}
	got := make(map[string]int32)
	for _, p := range c.Ports {
		got[p.Name] = p.ContainerPort
	}
	if !equality.Semantic.DeepEqual(got, ports) {
		t.Errorf("container ports %v, want %v", got, ports)
	}
	for what, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s probe is not an HTTP GET", what)
			continue
		}
		if probe.HTTPGet.Path != probes[what] || probe.HTTPGet.Port != intstr.FromString("metrics") {
			t.Errorf("%s probe GETs %s on %v, want %s on the metrics port", what, probe.HTTPGet.Path, probe.HTTPGet.Port.String(), probes[what])
		}
	}
	csc := c.SecurityContext
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		t.Error("container may escalate privileges or write its root file system")
	}
	return &c
}

// defaultImage is the IMAGE_NAME default of create_image.sh.
func defaultImage(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^IMAGE_NAME=\$\{IMAGE_NAME:-([^}]+)\}$`).FindSubmatch(readRepoFile(t, "deploy/docker/create_image.sh"))
	if m == nil {
		t.Fatal("create_image.sh sets no IMAGE_NAME default")
	}
	return string(m[1])
}

// checkService asserts that s reaches the pods of tmpl on the mutex and
// metrics ports, and not on the management port.
func checkService(t *testing.T, s *corev1.Service, tmpl corev1.PodTemplateSpec) {
	t.Helper()
	if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(tmpl.Labels)) {
		t.Errorf("service selector %v does not select the pods %v", s.Spec.Selector, tmpl.Labels)
	}
	var names []string
	for _, p := range s.Spec.Ports {
		names = append(names, p.Name)
		if p.TargetPort != intstr.FromString(p.Name) || p.Port != containerPorts[p.Name] {
			t.Errorf("service port %s: %d -> %s, want %d -> %s", p.Name, p.Port, p.TargetPort.String(), containerPorts[p.Name], p.Name)
		}
	}
	if !slices.Equal(names, []string{"mutex", "metrics", "http"}) {
		t.Errorf("service ports %q, want mutex, metrics and http only: the management port can release every lock", names)
	}
}

func envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func TestKubernetesPersistent(t *testing.T) {
	checkPersistent(t, loadManifests(t, "locking-center.yaml"))
}

// checkPersistent asserts what one node with its write-ahead log on a
// claim must be: a Deployment of one replica, its Service, DATA_PATH on a
// volume of a ReadWriteOnce claim.
func checkPersistent(t *testing.T, m manifests) {
	t.Helper()
	d := one(t, m.deployments, "Deployment")
	c := checkServer(t, d)
	checkService(t, one(t, m.services, "Service"), d.Spec.Template)

	dataPath, ok := envValue(c, "DATA_PATH")
	if !ok || !path.IsAbs(dataPath) {
		t.Fatalf("DATA_PATH %q, want an absolute path", dataPath)
	}
	mount := ""
	for _, vm := range c.VolumeMounts {
		if strings.HasPrefix(dataPath, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			mount = vm.Name
		}
	}
	if mount == "" {
		t.Fatalf("DATA_PATH %q is on no volume mount: the locks would not outlive the pod", dataPath)
	}
	var claimName string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == mount && v.PersistentVolumeClaim != nil {
			claimName = v.PersistentVolumeClaim.ClaimName
		}
	}
	claim := one(t, m.claims, "PersistentVolumeClaim")
	if claimName == "" || claimName != claim.Name {
		t.Fatalf("volume %q mounts claim %q, want the claim %q of the same file", mount, claimName, claim.Name)
	}
	if !slices.Equal(claim.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("claim access modes %v, want ReadWriteOnce only: one writer of the log", claim.Spec.AccessModes)
	}
	if q := claim.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("10Mi")) < 0 {
		t.Errorf("claim requests %s of storage", q.String())
	}
}

// TestKubernetesMemory checks the variant without persistence, and that it
// is the persistent one minus DATA_PATH, the volume and the claim, so the
// two cannot drift apart.
func TestKubernetesMemory(t *testing.T) {
	mem := loadManifests(t, "locking-center-memory.yaml")
	d := one(t, mem.deployments, "Deployment")
	c := checkServer(t, d)
	checkService(t, one(t, mem.services, "Service"), d.Spec.Template)
	if _, ok := envValue(c, "DATA_PATH"); ok {
		t.Error("the memory variant sets DATA_PATH")
	}
	if len(mem.claims) != 0 || len(d.Spec.Template.Spec.Volumes) != 0 || len(c.VolumeMounts) != 0 {
		t.Error("the memory variant has a claim or a volume")
	}

	per := loadManifests(t, "locking-center.yaml")
	want := one(t, per.deployments, "Deployment").DeepCopy()
	want.Spec.Template.Spec.Volumes = nil
	wc := &want.Spec.Template.Spec.Containers[0]
	wc.VolumeMounts = nil
	wc.Env = slices.DeleteFunc(wc.Env, func(e corev1.EnvVar) bool { return e.Name == "DATA_PATH" })
	if len(wc.Env) == 0 {
		wc.Env = nil
	}
	if !equality.Semantic.DeepEqual(d, want) {
		t.Error("the memory Deployment differs from the persistent one by more than DATA_PATH and its volume")
	}
	if !equality.Semantic.DeepEqual(one(t, mem.services, "Service"), one(t, per.services, "Service")) {
		t.Error("the two variants' Services differ")
	}
}

// TestKubernetesClientSource checks the client snippet: the pod IP comes
// from the downward API and is passed on as the source.
func TestKubernetesClientSource(t *testing.T) {
	m := loadManifests(t, "client-example.yaml")
	one(t, one(t, m.deployments, "Deployment").Spec.Template.Spec.Containers, "container")
	c := &one(t, m.deployments, "Deployment").Spec.Template.Spec.Containers[0]
	podIP := -1
	for i, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP" {
			podIP = i
		}
	}
	if podIP < 0 {
		t.Fatal("no variable takes status.podIP from the downward API")
	}
	ref := "$(" + c.Env[podIP].Name + ")"
	source, ok := envValue(c, "LOCKING_CENTER_SOURCE")
	if !ok || source != ref {
		t.Fatalf("LOCKING_CENTER_SOURCE %q, want %q", source, ref)
	}
	// $(VAR) expands only from variables defined before it.
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "LOCKING_CENTER_SOURCE" }); i < podIP {
		t.Errorf("LOCKING_CENTER_SOURCE is defined before %s and would not expand", c.Env[podIP].Name)
	}
	if addr, _ := envValue(c, "LOCKING_CENTER_ADDRESS"); addr != "locking-center:22119" {
		t.Errorf("LOCKING_CENTER_ADDRESS %q, want the Service's mutex port", addr)
	}
}
