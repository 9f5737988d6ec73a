package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/httpapi"
	"github.com/locking-center/locking-center/mutex"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("runtime.runCleanups")) // the runtime runs cleanups (unique's) on a goroutine of its own
}

// clock is a node clock the test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 8, 1, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// env is a node with the HTTP front end served on 127.0.0.1.
type env struct {
	t     testing.TB
	node  *mutex.Node
	srv   *httpapi.Server
	url   string // http://127.0.0.1:port
	reg   *prometheus.Registry
	clock *clock // nil: the node's own clock
}

type options struct {
	cfg   httpapi.Config
	clock *clock
	node  *mutex.Node // given: served as it is, and not closed by the env
	quiet bool        // no logs (benchmarks)
}

func start(t testing.TB, o options) *env {
	t.Helper()
	node := o.node
	if node == nil {
		var now func() time.Time
		if o.clock != nil {
			now = o.clock.Now
		}
		node = mutex.NewNode(mutex.NodeConfig{Clock: now})
		t.Cleanup(node.Close)
	}
	e := &env{t: t, node: node, reg: prometheus.NewRegistry(), clock: o.clock}
	o.cfg.Registerer = e.reg
	if !o.quiet && o.cfg.Logger == nil {
		o.cfg.Logger = testLogger(t)
	}
	srv, err := httpapi.New(node, o.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, httpapi.ErrClosed) {
			t.Errorf("Serve: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	e.srv, e.url = srv, "http://"+ln.Addr().String()
	return e
}

// journaled starts a server with cfg over a node that journals into a
// memory log, and returns it with a function that stops both and starts
// a server with cfg2 over a node restored from the log, as after a
// restart of lcd.
func journaled(t *testing.T, cfg httpapi.Config) (*env, func(cfg2 httpapi.Config) *env) {
	t.Helper()
	j := mutex.NewMemoryJournal()
	node1 := mutex.NewNode(mutex.NodeConfig{Journal: j})
	e1 := start(t, options{node: node1, cfg: cfg})
	return e1, func(cfg2 httpapi.Config) *env {
		t.Helper()
		e1.srv.Close()
		node1.Close()
		tbl := mutex.NewTable()
		j.Export(func(r *mutex.Record) { tbl.Import(r) })
		tbl.FinishImport()
		node2 := mutex.NewNode(mutex.NodeConfig{Table: tbl})
		t.Cleanup(node2.Close)
		return start(t, options{node: node2, cfg: cfg2})
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// answer is a decoded answer of the API.
type answer struct {
	code   int
	body   []byte
	m      map[string]any
	header http.Header
}

func (a answer) str(k string) string { s, _ := a.m[k].(string); return s }

// lock returns the "lock" object of an acquire's answer.
func (a answer) lock() map[string]any { m, _ := a.m["lock"].(map[string]any); return m }

// token returns the fencing token of an acquire's answer.
func (a answer) token() uint64 { return u64(a.lock()["fencing_token"]) }

// num returns a JSON number (decoded with UseNumber) as a float.
func num(v any) float64 {
	n, _ := v.(json.Number)
	f, _ := n.Float64()
	return f
}

// u64 returns a JSON number (decoded with UseNumber) exactly.
func u64(v any) uint64 {
	n, _ := v.(json.Number)
	u, _ := strconv.ParseUint(string(n), 10, 64)
	return u
}

// do sends method path with body and decodes the JSON answer.
func (e *env) do(ctx context.Context, method, path, body string) (answer, error) {
	return e.doWith(ctx, method, path, body)
}

// doWith is do with headers, given as name, value, name, value...
func (e *env) doWith(ctx context.Context, method, path, body string, header ...string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{code: resp.StatusCode, body: b, header: resp.Header}
	if ct := resp.Header.Get("Content-Type"); ct == "application/json" {
		var v any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return a, err
		}
		a.m, _ = v.(map[string]any)
	}
	return a, nil
}

// post sends a POST and fails the test when it cannot be sent.
func (e *env) post(path, body string) answer {
	e.t.Helper()
	a, err := e.do(context.Background(), http.MethodPost, path, body)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	return a
}

// expect checks an answer's status code (and, for failures, its code).
func expect(t testing.TB, a answer, code int, errCode string) {
	t.Helper()
	if a.code != code || errCode != "" && a.str("code") != errCode {
		t.Fatalf("answer %d %s, want %d %s", a.code, a.body, code, errCode)
	}
}

// acquire posts an acquire and checks that it was granted.
func (e *env) acquire(body string) answer {
	e.t.Helper()
	a := e.post("/api/v1/locks/acquire", body)
	expect(e.t, a, http.StatusOK, "")
	return a
}

// keys returns the observability listing.
func (e *env) keys() []map[string]any {
	e.t.Helper()
	resp, err := http.Get(e.url + "/api/v1/locks/observability")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var ks []map[string]any
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if err := dec.Decode(&ks); err != nil {
		e.t.Fatal(err)
	}
	return ks
}

// held returns the sources of key's holders, in token order.
func (e *env) held(key string) []string {
	var out []string
	for _, h := range e.node.Describe(key).Holders {
		out = append(out, h.Source)
	}
	return out
}

// advance moves the clock and lets the node act on it.
func (e *env) advance(d time.Duration) {
	e.clock.add(d)
	e.node.Advance()
}

// metric returns the value of a counter or gauge of the front end.
func (e *env) metric(name string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	e.t.Fatalf("no metric %s", name)
	return 0
}

// eventually polls cond until it holds, failing after 30 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// sse is a subscriber of the event stream.
type sse struct {
	t      testing.TB
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// sseEvent is one message of the stream: its id line, its data decoded,
// or a comment.
type sseEvent struct {
	id      string
	data    map[string]any
	comment string
}

// subscribe opens the event stream at path?query with extra headers.
func (e *env) subscribe(query string, header ...string) *sse {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/api/v1/locks/subscribe"+query, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		e.t.Fatalf("subscribe: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	s := &sse{t: e.t, resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	e.t.Cleanup(s.close)
	if c := s.next(); c.comment != "connected" {
		e.t.Fatalf("first message %+v, want the connected comment", c)
	}
	return s
}

func (s *sse) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads the next message (event or comment), failing after 30 s.
func (s *sse) next() sseEvent {
	s.t.Helper()
	type result struct {
		ev  sseEvent
		err error
	}
	got := make(chan result, 1)
	go func() {
		ev, err := s.read()
		got <- result{ev, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			s.t.Fatalf("event stream: %v", r.err)
		}
		return r.ev
	case <-time.After(30 * time.Second):
		s.close()
		<-got
		s.t.Fatal("no event within 30 s")
	}
	return sseEvent{}
}

// read reads one message.
func (s *sse) read() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.id != "" || ev.data != nil || ev.comment != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, ": "):
			ev.comment, _, _ = strings.Cut(line[2:], ":")
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "data: "):
			dec := json.NewDecoder(strings.NewReader(line[6:]))
			dec.UseNumber()
			if err := dec.Decode(&ev.data); err != nil {
				return ev, err
			}
		default:
			return ev, errors.New("unexpected line " + line)
		}
	}
}

// event reads messages until an event, skipping keep-alive comments.
func (s *sse) event() sseEvent {
	s.t.Helper()
	for {
		if ev := s.next(); ev.data != nil {
			return ev
		}
	}
}

// expectEvent reads the next event and checks its action and key.
func (s *sse) expectEvent(action, key string) sseEvent {
	s.t.Helper()
	ev := s.event()
	if ev.data["action"] != action || ev.data["key"] != key {
		s.t.Fatalf("event %v, want %s of %s", ev.data, action, key)
	}
	return ev
}

// jsonBody renders v as a request body.
func jsonBody(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(bytes.TrimSpace(b))
}
