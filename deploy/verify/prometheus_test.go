package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// dataPathOnly are the metrics lcd exports only with a DATA_PATH.
var dataPathOnly = []string{
	"locking_center_store_write_errors_total",
	"locking_center_store_compactions_total",
}

// promtool runs promtool with args in deploy/prometheus and fails t unless
// it exits 0. stdin may be empty.
func promtool(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(requireTool(t, "promtool"), args...)
	cmd.Dir = repoFile("deploy/prometheus")
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtoolRules(t *testing.T) {
	promtool(t, "", "check", "rules", "alerts.yml")
	out := promtool(t, "", "test", "rules", "alerts_test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules did not report SUCCESS:\n%s", out)
	}
	promtool(t, "", "check", "config", "prometheus.yml")
}

// alertRule is one rule of a Prometheus rule file.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// alertRules reads deploy/prometheus/alerts.yml.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var file struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(readRepoFile(t, "deploy/prometheus/alerts.yml"), &file); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestStuckLockRule pins the rule users depend on: its name, threshold and
// zero `for`, since the metric itself already counts the held seconds.
func TestStuckLockRule(t *testing.T) {
	for _, r := range alertRules(t) {
		if r.Alert != "LockingCenterLockHeldTooLong" {
			continue
		}
		if r.Expr != "locking_center_lock_held_seconds > 60" || r.For != "0s" {
			t.Errorf("LockingCenterLockHeldTooLong is %q for %q, want %q for 0s",
				r.Expr, r.For, "locking_center_lock_held_seconds > 60")
		}
		for _, want := range []string{"$labels.key", "$labels.source_addr", "$labels.remote_addr", "lc-cli reset"} {
			if !strings.Contains(r.Annotations["description"], want) {
				t.Errorf("description lacks %q", want)
			}
		}
		return
	}
	t.Fatal("alerts.yml has no LockingCenterLockHeldTooLong")
}

// metricNames returns the sample names of a text exposition: the family
// name, with _bucket, _sum and _count for histograms and summaries.
func metricNames(t *testing.T, text string) map[string]bool {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	names := make(map[string]bool)
	for name, f := range families {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
		default:
			names[name] = true
		}
	}
	return names
}

// busyScrape returns a scrape of s while one key is held and one lock
// request waits behind it, so that every per-key series is present.
func busyScrape(t *testing.T, s *server) string {
	t.Helper()
	s.lock(t, "orders/batch-7")
	s.park(t, "orders/batch-7")
	var text string
	waitUntil(t, s.process, "a parked waiter in the metrics", func() error {
		text = s.scrape(t)
		if !strings.Contains(text, "\nlocking_center_waiters 1\n") {
			return errors.New("locking_center_waiters is not 1 yet")
		}
		return nil
	})
	return text
}

// clusterOnly are the metrics lcd exports only as a node of a cluster
// (NODE_ID set).
var clusterOnly = []string{
	"locking_center_raft_state",
	"locking_center_raft_term",
	"locking_center_raft_last_index",
	"locking_center_raft_commit_index",
	"locking_center_raft_applied_index",
	"locking_center_raft_leader_changes_total",
	"locking_center_raft_proposed_commands_total",
	"locking_center_raft_proposed_entries_total",
	"locking_center_raft_apply_seconds_bucket",
	"locking_center_raft_apply_seconds_sum",
	"locking_center_raft_apply_seconds_count",
}

// scrapes are the metric names of a live lcd in each of its modes.
type scrapes struct {
	memory, durable, clustered map[string]bool
}

// liveMetrics returns the metric names a running lcd exports without and
// with a DATA_PATH, and as the one node of a cluster, each checked by
// promtool check metrics.
func liveMetrics(t *testing.T) scrapes {
	t.Helper()
	mem := busyScrape(t, startServer(t))
	promtool(t, mem, "check", "metrics")
	dur := busyScrape(t, startServer(t, "DATA_PATH="+filepath.Join(t.TempDir(), "locks.wal")))
	promtool(t, dur, "check", "metrics")
	raft := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	clu := busyScrape(t, startServer(t, "NODE_ID=n1", "RAFT_DIR="+t.TempDir(), "RAFT_ADDRESS="+raft,
		"RAFT_PEERS=n1="+raft))
	promtool(t, clu, "check", "metrics")
	return scrapes{metricNames(t, mem), metricNames(t, dur), metricNames(t, clu)}
}

func TestLiveMetrics(t *testing.T) {
	live := liveMetrics(t)
	memory, durable := live.memory, live.durable
	for _, name := range []string{
		"locking_center_locked_keys",
		"locking_center_lock_held_seconds",
		"locking_center_lock_acquired_timestamp_seconds",
		"go_goroutines",
	} {
		if !memory[name] {
			t.Errorf("lcd does not export %s", name)
		}
	}
	for _, name := range dataPathOnly {
		if memory[name] {
			t.Errorf("lcd exports %s without DATA_PATH", name)
		}
		if !durable[name] {
			t.Errorf("lcd with DATA_PATH does not export %s", name)
		}
	}
	for _, name := range clusterOnly {
		if memory[name] || durable[name] {
			t.Errorf("lcd exports %s without NODE_ID", name)
		}
		if !live.clustered[name] {
			t.Errorf("a cluster node does not export %s", name)
		}
	}
	for name := range memory {
		if !durable[name] {
			t.Errorf("lcd with DATA_PATH lacks %s", name)
		}
		if !live.clustered[name] {
			t.Errorf("a cluster node lacks %s", name)
		}
	}
}

// grafanaVariables stand in for the dashboard's variables so that its
// queries parse as PromQL.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
	"$instance", ".*",
)

// dashboardQueries returns every PromQL expression of the dashboard: the
// panels' targets and the variables' label_values queries.
func dashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(readRepoFile(t, "deploy/prometheus/grafana-dashboard.json"), &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	queries := make(map[string][]string)
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries[p.Title] = append(queries[p.Title], tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if inner, ok := strings.CutPrefix(v.Definition, "label_values("); ok {
			metric, _, _ := strings.Cut(inner, ",")
			queries["variable "+v.Name] = append(queries["variable "+v.Name], strings.TrimSpace(metric))
		}
	}
	return queries
}

// selectorNames parses expr as PromQL and returns the metric names it
// selects. Every selector must name its metric.
func selectorNames(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := parser.ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		t.Errorf("%s: %q: %v", where, expr, err)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				t.Errorf("%s: %q selects series without a metric name", where, expr)
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// TestDashboardAndRulesUseExportedMetrics parses every query of the
// dashboard and every alert expression and compares the metric names with
// what a live lcd exports. Names that only a DATA_PATH brings must be the
// store's pair and come from the DATA_PATH scrape; names that only a
// cluster node brings must be the raft series and come from its scrape.
func TestDashboardAndRulesUseExportedMetrics(t *testing.T) {
	live := liveMetrics(t)
	memory, durable := live.memory, live.durable
	queries := dashboardQueries(t)
	for _, title := range []string{
		"Locked keys", "Longest-held keys", "Parked waiters", "Grant rate",
		"Wait time quantiles", "Store write errors",
		"Raft state", "Raft term", "Leader changes", "Commit and apply lag", "Apply latency p99",
	} {
		if _, ok := queries[title]; !ok {
			t.Errorf("dashboard has no panel %q", title)
		}
	}
	for _, r := range alertRules(t) {
		queries["alert "+r.Alert] = []string{r.Expr}
	}
	// up is written by Prometheus for every target, not by lcd.
	synthetic := map[string]bool{"up": true}

	used := make(map[string]bool)
	for _, where := range slices.Sorted(maps.Keys(queries)) {
		for _, expr := range queries[where] {
			for _, name := range selectorNames(t, where, expr) {
				used[name] = true
				switch {
				case memory[name], synthetic[name] && strings.HasPrefix(where, "alert "):
				case durable[name] && slices.Contains(dataPathOnly, name):
				case live.clustered[name] && slices.Contains(clusterOnly, name):
				default:
					t.Errorf("%s: %q uses %s, which lcd does not export", where, expr, name)
				}
			}
		}
	}
	names := slices.Collect(maps.Keys(used))
	sort.Strings(names)
	t.Logf("metrics used: %s", strings.Join(names, " "))
	for _, name := range append([]string{
		"locking_center_locked_keys", "locking_center_lock_held_seconds", "locking_center_waiters",
		"locking_center_grants_total", "locking_center_lock_wait_seconds_bucket",
		"locking_center_raft_state", "locking_center_raft_term", "locking_center_raft_commit_index",
		"locking_center_raft_applied_index", "locking_center_raft_leader_changes_total",
		"locking_center_raft_apply_seconds_bucket",
	}, dataPathOnly...) {
		if !used[name] {
			t.Errorf("neither the dashboard nor the alerts use %s", name)
		}
	}
}
