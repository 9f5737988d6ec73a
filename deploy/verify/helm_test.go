package verify

import (
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// chartDir is the Helm chart, relative to the top of the tree.
const chartDir = "deploy/helm/locking-center"

// helmPath is the helm that deploy/test.sh built ($LC_HELM), or helm on
// PATH.
func helmPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LC_HELM"); p != "" {
		return p
	}
	return requireTool(t, "helm")
}

// helm runs helm with args and returns its stdout; a failure fails t
// unless fail is set, when the error and stderr are returned instead.
func helm(t *testing.T, fail bool, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(helmPath(t), args...)
	cmd.Dir = repoFile(".")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil && !fail {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// render is helm template of the chart as release locking-center with
// the values given, decoded.
func render(t *testing.T, set ...string) manifests {
	t.Helper()
	args := []string{"template", "locking-center", chartDir, "--namespace", "default"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, _, _ := helm(t, false, args...)
	return decodeManifests(t, "helm template "+strings.Join(set, " "), []byte(out))
}

// tlsOn are the values of TLS and tokens from Secrets.
var tlsOn = []string{"tls.enabled=true", "tls.secretName=lc-tls", "tokens.secretName=lc-tokens",
	"metrics.serviceMonitor.enabled=true"}

func TestHelmLint(t *testing.T) {
	for _, set := range [][]string{nil, {"replicas=3"}, tlsOn, append([]string{"replicas=3"}, tlsOn...),
		{"tls.enabled=true", "tls.secretName=lc-tls", "tls.clientCASecretName=lc-clients", "tls.sourceFromCert=true"}} {
		args := []string{"lint", chartDir, "--strict"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		helm(t, false, args...)
	}
}

// One node: the Deployment, Service and claim of locking-center.yaml's
// checks; without persistence, those of the memory variant.
func TestHelmOneNode(t *testing.T) {
	m := render(t)
	if len(m.statefulSets) != 0 || len(m.budgets) != 0 || len(m.serviceMonitors) != 0 {
		t.Error("one node renders a StatefulSet, a PodDisruptionBudget or a ServiceMonitor")
	}
	checkPersistent(t, m)
	annotations := one(t, m.deployments, "Deployment").Spec.Template.Annotations
	if annotations["prometheus.io/scrape"] != "true" || annotations["prometheus.io/port"] != "22121" {
		t.Errorf("pod annotations %v, want prometheus.io/scrape on the metrics port", annotations)
	}

	mem := render(t, "persistence.enabled=false")
	d := one(t, mem.deployments, "Deployment")
	c := checkServer(t, d)
	if _, ok := envValue(c, "DATA_PATH"); ok || len(mem.claims) != 0 || len(d.Spec.Template.Spec.Volumes) != 0 {
		t.Error("without persistence the node has DATA_PATH, a claim or a volume")
	}
}

// Three nodes: the checks of locking-center-cluster.yaml, its pods' settings
// run as a cluster included.
func TestHelmCluster(t *testing.T) {
	m := render(t, "replicas=3")
	c := checkCluster(t, m, "locking-center")
	if peers, _ := envValue(c, "RAFT_PEERS"); len(strings.Split(peers, ",")) != 3 {
		t.Errorf("RAFT_PEERS %q, want three nodes", peers)
	}
	for _, set := range [][]string{{"replicas=2"}, {"replicas=3", "persistence.enabled=false"},
		{"tls.enabled=true"}, {"replicas=3", "tls.enabled=true", "tls.secretName=s", "tls.clientCASecretName=c",
			"tls.sourceFromCert=true"}} {
		args := []string{"template", "locking-center", chartDir}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if _, stderr, err := helm(t, true, args...); err == nil || !strings.Contains(stderr, "Error") {
			t.Errorf("helm template with %v: %v, stderr %q; want a refusal", set, err, stderr)
		}
	}
}

// checkSecretFile asserts that the variable name of c holds a file of a
// read-only mount of the Secret secret in pod.
func checkSecretFile(t *testing.T, pod corev1.PodSpec, c *corev1.Container, name, secret string) {
	t.Helper()
	file, ok := envValue(c, name)
	if !ok {
		t.Errorf("%s is not set", name)
		return
	}
	for _, vm := range c.VolumeMounts {
		if path.Dir(file) != strings.TrimSuffix(vm.MountPath, "/") {
			continue
		}
		if !vm.ReadOnly {
			t.Errorf("%s's mount %s is writable", name, vm.MountPath)
		}
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName == secret {
				return
			}
		}
	}
	t.Errorf("%s %q is not a file of the Secret %s", name, file, secret)
}

// With TLS on, one node and three: every certificate file is in the TLS
// Secret, a cluster's peer CA too, the tokens file in its Secret, the
// probes and the scrape use HTTPS, and the ServiceMonitor scrapes the
// client Service's metrics port.
func TestHelmTLS(t *testing.T) {
	for _, replicas := range []string{"replicas=1", "replicas=3"} {
		m := render(t, append([]string{replicas}, tlsOn...)...)
		var tmpl corev1.PodTemplateSpec
		vars := []string{"TLS_CERT_FILE", "TLS_KEY_FILE"}
		if replicas == "replicas=1" {
			tmpl = one(t, m.deployments, "Deployment").Spec.Template
		} else {
			tmpl = one(t, m.statefulSets, "StatefulSet").Spec.Template
			vars = append(vars, "TLS_PEER_CA_FILE")
		}
		c := &tmpl.Spec.Containers[0]
		for _, v := range vars {
			checkSecretFile(t, tmpl.Spec, c, v, "lc-tls")
		}
		checkSecretFile(t, tmpl.Spec, c, "AUTH_TOKENS_FILE", "lc-tokens")
		for what, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				t.Errorf("%s: the %s probe's scheme is %q under TLS", replicas, what, probe.HTTPGet.Scheme)
			}
		}
		if tmpl.Annotations["prometheus.io/scheme"] != "https" {
			t.Errorf("%s: pod annotations %v, want prometheus.io/scheme https", replicas, tmpl.Annotations)
		}
		sm := one(t, m.serviceMonitors, "ServiceMonitor")
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Fatalf("ServiceMonitor selector %v: %v", sm.Spec.Selector, err)
		}
		var scraped []string
		for _, s := range m.services {
			if sel.Matches(labels.Set(s.Labels)) && slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool {
				return p.Name == "metrics"
			}) {
				scraped = append(scraped, s.Name)
			}
		}
		ep := one(t, sm.Spec.Endpoints, "ServiceMonitor endpoint")
		if !slices.Equal(scraped, []string{"locking-center"}) || ep.Port != "metrics" || ep.Path != "/metrics" || ep.Scheme != "https" {
			t.Errorf("%s: the ServiceMonitor scrapes %v at %s %s %s; want the client Service's metrics port over https",
				replicas, scraped, ep.Port, ep.Scheme, ep.Path)
		}
	}
	mutual := render(t, "tls.enabled=true", "tls.secretName=lc-tls", "tls.clientCASecretName=lc-clients",
		"tls.sourceFromCert=true")
	tmpl := one(t, mutual.deployments, "Deployment").Spec.Template
	checkSecretFile(t, tmpl.Spec, &tmpl.Spec.Containers[0], "TLS_CLIENT_CA_FILE", "lc-clients")
	if v, _ := envValue(&tmpl.Spec.Containers[0], "TLS_SOURCE_FROM_CERT"); v != "true" {
		t.Errorf("TLS_SOURCE_FROM_CERT %q", v)
	}
}
