package metrics

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/locking-center/locking-center/mutex"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func newRegistry(t *testing.T, tb *mutex.Node) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := Register(reg, tb); err != nil {
		t.Fatal(err)
	}
	return reg
}

// heldSeries returns the key labels of the held-seconds series.
func heldSeries(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var keys []string
	for _, mf := range mfs {
		if mf.GetName() != Namespace+"_lock_held_seconds" {
			continue
		}
		for _, m := range mf.Metric {
			keys = append(keys, labelOf(m, LabelKey))
		}
	}
	return keys
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestSeriesFollowGrantsAndReleases(t *testing.T) {
	tb := mutex.NewNode(mutex.NodeConfig{})
	t.Cleanup(tb.Close)
	reg := newRegistry(t, tb)
	if got := heldSeries(t, reg); len(got) != 0 {
		t.Fatalf("series before any lock: %v", got)
	}
	tb.Lock(context.Background(), mutex.Claim{Key: "orders/batch-7", Source: "10.0.0.9", RemoteAddr: "10.0.0.9:44120"})
	if got := heldSeries(t, reg); len(got) != 1 || got[0] != "orders/batch-7" {
		t.Fatalf("series after lock: %v", got)
	}
	if n := testutil.ToFloat64(gaugeOf(t, reg, Namespace+"_locked_keys")); n != 1 {
		t.Fatalf("locked_keys = %v", n)
	}
	tb.Release("orders/batch-7")
	if got := heldSeries(t, reg); len(got) != 0 {
		t.Fatalf("series after release: %v", got)
	}
	want := `
# HELP locking_center_grants_total Keys granted, at once or to a parked request, since start-up.
# TYPE locking_center_grants_total counter
locking_center_grants_total 1
# HELP locking_center_locked_keys Number of keys currently held under a lock.
# TYPE locking_center_locked_keys gauge
locking_center_locked_keys 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		Namespace+"_grants_total", Namespace+"_locked_keys"); err != nil {
		t.Fatal(err)
	}
}

// gaugeOf wraps one gathered gauge as a collector for testutil.ToFloat64.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Gauge {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			g.Set(mf.Metric[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

func TestNonUTF8KeysScrapeCleanly(t *testing.T) {
	tb := mutex.NewNode(mutex.NodeConfig{})
	t.Cleanup(tb.Close)
	reg := newRegistry(t, tb)
	keys := []string{"\xff", `\xff`, "a\x00b", "a\nb", `a"b`, "é", "\xc3", "e\u0301"}
	for _, k := range keys {
		if _, err := tb.Lock(context.Background(), mutex.Claim{Key: k, Source: k + "\xfe", RemoteAddr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	got := heldSeries(t, reg)
	if len(got) != len(keys) {
		t.Fatalf("%d series for %d keys: %q", len(got), len(keys), got)
	}
	seen := map[string]bool{}
	for _, v := range got {
		if !utf8.ValidString(v) || seen[v] {
			t.Fatalf("label %q invalid or repeated", v)
		}
		seen[v] = true
	}
	// The text exposition parses back.
	mfs, _ := reg.Gather()
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatalf("encode %s: %v", mf.GetName(), err)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := parser.TextToMetricFamilies(&buf); err != nil {
		t.Fatalf("exposition does not parse: %v", err)
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"locking-me": "locking-me",
		"é":          "é",
		"\xff":       `\xff`,
		`\xff`:       `\\xff`,
		"a\x00":      `a\x00`,
		"tab\t":      `tab\x09`,
		"\u0085":     `\xc2\x85`,
	} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzLabelValue checks that the label value is valid UTF-8 and decodes
// back to the input, which makes the mapping one-to-one.
func FuzzLabelValue(f *testing.F) {
	for _, s := range []string{"", "a", "\xff", `\`, `\x41`, "\x00\x7f\u0085", "é\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := LabelValue(s)
		if !utf8.ValidString(v) {
			t.Fatalf("LabelValue(%q) = %q is not UTF-8", s, v)
		}
		if back := unescape(t, v); back != s {
			t.Fatalf("LabelValue(%q) = %q decodes to %q", s, v, back)
		}
	})
}

// unescape inverts LabelValue.
func unescape(t *testing.T, v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			b.WriteByte(v[i])
			continue
		}
		switch {
		case i+1 < len(v) && v[i+1] == '\\':
			b.WriteByte('\\')
			i++
		case i+3 < len(v) && v[i+1] == 'x':
			var c byte
			for _, h := range []byte(v[i+2 : i+4]) {
				c = c<<4 | fromHex(t, h)
			}
			b.WriteByte(c)
			i += 3
		default:
			t.Fatalf("bad escape in %q", v)
		}
	}
	return b.String()
}

func fromHex(t *testing.T, h byte) byte {
	switch {
	case h >= '0' && h <= '9':
		return h - '0'
	case h >= 'a' && h <= 'f':
		return h - 'a' + 10
	}
	t.Fatalf("bad hex digit %q", h)
	return 0
}

// The series of sessions, leases, lock-delay, tokens and deadlocks follow
// the table.
func TestSessionSeries(t *testing.T) {
	clk := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clk }
	tb := mutex.NewNode(mutex.NodeConfig{Clock: now})
	t.Cleanup(tb.Close)
	reg := newRegistry(t, tb)
	a, _, _ := tb.OpenSession("a", 10*time.Second, [mutex.SecretHashLen]byte{}, "", nopRoute{})
	b, _, _ := tb.OpenSession("b", time.Hour, [mutex.SecretHashLen]byte{}, "", nopRoute{})
	tb.ApplySession(mutex.Command{Op: mutex.OpAcquire, Session: a.ID(), Request: 1, Key: "x", Delay: time.Minute})
	tb.ApplySession(mutex.Command{Op: mutex.OpAcquire, Session: b.ID(), Request: 1, Key: "y", Lease: time.Second})
	tb.ApplySession(mutex.Command{Op: mutex.OpAcquire, Session: b.ID(), Request: 2, Key: "y2"})
	tb.ApplySession(mutex.Command{Op: mutex.OpAcquire, Session: a.ID(), Request: 2, Key: "y2"})
	tb.ApplySession(mutex.Command{Op: mutex.OpAcquire, Session: b.ID(), Request: 3, Key: "x"}) // b waits for a, a for b
	mu.Lock()
	clk = clk.Add(11 * time.Second) // a expires; y's lease ran out
	mu.Unlock()
	b.Touch()
	tb.Advance()
	want := map[string]float64{
		"locking_center_sessions":               1,
		"locking_center_session_expiries_total": 1,
		"locking_center_lease_expiries_total":   1,
		"locking_center_lock_delay_keys":        1,
		"locking_center_deadlocks_total":        1,
		"locking_center_session_resumes_total":  0,
	}
	for name, v := range want {
		if got := gaugeValue(t, reg, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	if tok := gaugeValue(t, reg, "locking_center_last_fencing_token"); tok < 1 {
		t.Errorf("last fencing token %v", tok)
	}
}

// fixedSnapshot is a table whose snapshot is s.
type fixedSnapshot mutex.Snapshot

func (f fixedSnapshot) Snapshot() mutex.Snapshot { return mutex.Snapshot(f) }

// The last fencing token is exported exactly, in two 32-bit halves, also
// where the float gauge rounds it (a token of a cluster, near the clock's
// Unix nanoseconds, is above 2^53).
func TestLastFencingTokenExact(t *testing.T) {
	const token = 1796154882964487705 // odd, above 2^53: no float64 holds it
	if uint64(float64(token)) == token {
		t.Fatal("the test's token is exact as a float")
	}
	reg := prometheus.NewRegistry()
	if err := Register(reg, fixedSnapshot{LastToken: token}); err != nil {
		t.Fatal(err)
	}
	high := gaugeValue(t, reg, "locking_center_last_fencing_token_high")
	low := gaugeValue(t, reg, "locking_center_last_fencing_token_low")
	if got := uint64(high)<<32 | uint64(low); got != token || high != float64(uint64(high)) || low >= 1<<32 {
		t.Fatalf("high %v low %v: %d, want %d", high, low, got, token)
	}
	if got := gaugeValue(t, reg, "locking_center_last_fencing_token"); got != float64(token) {
		t.Fatalf("last fencing token %v, want about %d", got, uint64(token))
	}
}

type nopRoute struct{}

func (nopRoute) Deliver(mutex.Output) {}
func (nopRoute) Flush()               {}

// gaugeValue returns the value of the unlabelled metric name.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not gathered", name)
	return 0
}

// locking_center_lock_holders counts a key's holders with its mode and
// limit.
func TestHoldersSeries(t *testing.T) {
	tb := mutex.NewNode(mutex.NodeConfig{})
	t.Cleanup(tb.Close)
	reg := newRegistry(t, tb)
	s, _, _ := tb.OpenSession("s", time.Minute, [mutex.SecretHashLen]byte{}, "", nopRoute{})
	for i, c := range []mutex.Command{
		{Key: "r", Mode: mutex.Shared, Owner: "a"}, {Key: "r", Mode: mutex.Shared, Owner: "b"},
		{Key: "sem", Limit: 4, Owner: "a"},
	} {
		c.Op, c.Session, c.Request = mutex.OpAcquire, s.ID(), uint64(i+1)
		tb.ApplySession(c)
	}
	tb.TryLock(mutex.Claim{Key: "v1", Source: "x"})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "locking_center_lock_holders" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[l["key"]+"/"+l["mode"]+"/"+l["limit"]] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"r/shared/1": 2, "sem/exclusive/4": 1, "v1/exclusive/1": 1}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("series %v, want %v", got, want)
		}
	}
}

// locking_center_refusals_total has one series per reason, the front ends'
// counts and the table's caps together.
func TestRefusalsSeries(t *testing.T) {
	tb := mutex.NewNode(mutex.NodeConfig{Limits: mutex.Limits{MaxHeld: 1}})
	t.Cleanup(tb.Close)
	reg := newRegistry(t, tb)
	for _, k := range []string{"a", "b"} {
		tb.Apply(mutex.Command{Op: mutex.OpAcquire, Key: k, Account: "10.0.0.1", Try: true, ConnBound: true})
	}
	tb.Refused(mutex.RefusedUnauthenticated)
	tb.Refused(mutex.RefusedUnauthenticated)
	tb.Refused(mutex.RefusedConnections)
	want := map[string]float64{"unauthenticated": 2, "forbidden": 0, "v1": 0, "connections": 1, "rate": 0,
		"held": 1, "parked": 0}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == Namespace+"_refusals_total" {
			for _, m := range mf.Metric {
				got[labelOf(m, LabelReason)] = m.GetCounter().GetValue()
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("refusal series %v, want %v", got, want)
	}
	for r, v := range want {
		if got[r] != v {
			t.Errorf("refusals{reason=%q} = %v, want %v", r, got[r], v)
		}
	}
}
