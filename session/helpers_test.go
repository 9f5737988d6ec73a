package session

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/serve"
	"github.com/locking-center/locking-center/internal/testcerts"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		runChild(args)
		return
	}
	check := checkFrames
	sendHook.Store(&check)
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("runtime.runCleanups")) // the runtime runs cleanups (unique's) on a goroutine of its own
}

// checkFrames stops the tests at the first frame the server would write
// that its own decoder refuses: one over the length limit, say.
func checkFrames(b []byte) {
	var f Frame
	for len(b) > 0 {
		n, err := ParseFrame(b, &f)
		if err != nil {
			panic(fmt.Sprintf("the server writes a frame it would refuse (%v): %.64x", err, b))
		}
		b = b[n:]
	}
}

// clock is a node clock a test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

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

// env is a node served on 127.0.0.1 through the mutex port: v1 and the
// session protocol on one listener.
type env struct {
	node    *mutex.Node
	addr    string
	session *Server
	clock   *clock // nil: the node's own clock
	stop    func() // closes the servers and the node; safe to call twice
	ca      *testcerts.CA
	tls     *tls.Config // the clients' TLS; nil without
}

// testParkAfter is the Config.ParkAfter of the tests' servers that name
// none: so short that a connection parks whenever it waits for its
// client, so that the tests go through the poller at every turn.
var testParkAfter = flag.Duration("park-after", time.Microsecond, "Config.ParkAfter of the test servers (negative: never park)")

type envOptions struct {
	cfg     Config
	clock   *clock
	journal mutex.Journal
	table   *mutex.Table // read back from a journal; nil: empty
	// tls serves the port over TLS with client certificates of a CA of
	// the test (env.ca); clients present one named "client".
	tls    bool
	limits mutex.Limits
	gate   *serve.Gate // the port's cap on connections; nil: none
	rep    replicated  // makes the node a cluster's (soloLog: its leader); nil: a single node
}

// replicated is a test's log of a node of a cluster: start applies it to
// the node until the test ends.
type replicated interface {
	mutex.Replicator
	start(testing.TB, *mutex.Node)
}

// start serves a new node until the test ends.
func start(t testing.TB, o envOptions) *env {
	t.Helper()
	e := startOn(t, o)
	t.Cleanup(e.stop)
	return e
}

// startOn serves a new node until stop is called.
func startOn(t testing.TB, o envOptions) *env {
	t.Helper()
	var now func() time.Time
	if o.clock != nil {
		now = o.clock.Now
	}
	ncfg := mutex.NodeConfig{Clock: now, Journal: o.journal, Table: o.table, Limits: o.limits}
	if o.rep != nil {
		ncfg.Replicator = o.rep
	}
	node := mutex.NewNode(ncfg)
	if o.rep != nil {
		o.rep.start(t, node)
	}
	log := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.cfg.Logger = log
	if o.cfg.ParkAfter == 0 {
		o.cfg.ParkAfter = *testParkAfter
	}
	ss, err := NewServer(node, o.cfg)
	if err != nil {
		t.Fatal(err)
	}
	v1cfg := oneshot.ServerConfig{Logger: log, Handoff: &oneshot.Handoff{First: Preface[0], Serve: ss.Serve, OverLimit: OverLimitGoodbye()}, Gate: o.gate}
	var ca *testcerts.CA
	if o.tls {
		ca = testcerts.NewCA(t, "session test CA")
		dir := t.TempDir()
		files := ca.Server(t).Write(t, dir, "server")
		st, err := tlsconf.Load(tlsconf.Config{CertFile: files.Cert, KeyFile: files.Key,
			ClientCAFile: ca.Write(t, dir, "ca"), NamedClients: o.cfg.SourceFromCert})
		if err != nil {
			t.Fatal(err)
		}
		v1cfg.TLS, v1cfg.SourceFromCert = st.Config(tlsconf.Require), o.cfg.SourceFromCert
	}
	v1, err := oneshot.NewServer(node, v1cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- v1.Serve(context.Background(), ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ss.Close()
			v1.Close()
			<-done
			node.Close()
		})
	}
	e := &env{node: node, addr: ln.Addr().String(), session: ss, clock: o.clock, stop: stop, ca: ca}
	if ca != nil {
		e.tls = testcerts.ClientConfig(ca, ca.Client(t, "client"))
		e.tls.ServerName = "localhost"
	}
	return e
}

// connect opens a connection to the port, over TLS when it speaks TLS.
func (e *env) connect(t testing.TB) net.Conn {
	t.Helper()
	return e.connectWith(t, e.tls)
}

// connectWith opens a connection with the TLS config cfg; nil: plain TCP.
func (e *env) connectWith(t testing.TB, cfg *tls.Config) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		c = tls.Client(c, cfg)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// bothTransports runs f with o over plain TCP, then over TLS.
func bothTransports(t *testing.T, o envOptions, f func(t *testing.T, o envOptions)) {
	t.Run("tcp", func(t *testing.T) { f(t, o) })
	o.tls = true
	t.Run("tls", func(t *testing.T) { f(t, o) })
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// client is a raw client of the session protocol.
type client struct {
	t   testing.TB
	c   net.Conn
	r   *reader
	id  uint64
	sid uint64
	sec []byte
}

// dial connects and sends the preface.
func (e *env) dial(t testing.TB) *client {
	t.Helper()
	return startClient(t, e.connect(t))
}

// startClient sends the preface on c.
func startClient(t testing.TB, c net.Conn) *client {
	t.Helper()
	if _, err := c.Write([]byte(Preface)); err != nil {
		t.Fatal(err)
	}
	return &client{t: t, c: c, r: &reader{c: c}}
}

// hello opens a session named name and returns the client.
func (e *env) hello(t testing.TB, name string, fields ...func(*frameBuilder)) *client {
	t.Helper()
	c := e.dial(t)
	c.send(TypeHello, append([]func(*frameBuilder){func(fb *frameBuilder) { fb.str(TagName, name) }}, fields...)...)
	w := c.expect(TypeWelcome)
	c.sid, _ = w.Uint(TagSession)
	sec, _ := w.Get(TagSecret)
	c.sec = append([]byte(nil), sec...)
	return c
}

// send writes one frame with the next request id and returns that id.
func (c *client) send(t Type, fields ...func(*frameBuilder)) uint64 {
	c.t.Helper()
	c.id++
	c.write(frameOf(t, c.id, fields...))
	return c.id
}

func frameOf(t Type, id uint64, fields ...func(*frameBuilder)) []byte {
	fb := begin(nil, t, id)
	for _, f := range fields {
		f(&fb)
	}
	return fb.end()
}

func (c *client) write(b []byte) {
	c.t.Helper()
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read returns the next frame from the server, failing after 30 s.
func (c *client) read() Frame {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var f Frame
	if err := c.r.next(&f); err != nil {
		c.t.Fatalf("read a frame: %v", err)
	}
	// The fields alias the buffer: copy them out.
	out := Frame{Type: f.Type, ID: f.ID}
	for _, fl := range f.Fields {
		out.Fields = append(out.Fields, Field{Tag: fl.Tag, Value: append([]byte(nil), fl.Value...)})
	}
	return out
}

// answer reads the next answer whole: a frame, and when it says more, the
// MORE frames that follow it, their list items joined to its fields. It
// fails when any other frame comes between them.
func (c *client) answer() (f Frame, frames int) {
	c.t.Helper()
	f = c.read()
	for frames = 1; ; frames++ {
		more, _ := f.Uint(TagMore)
		f.Fields = slices.DeleteFunc(f.Fields, func(fl Field) bool { return fl.Tag == TagMore })
		if more == 0 {
			return f, frames
		}
		next := c.read()
		if next.Type != TypeMore || next.ID != f.ID {
			c.t.Fatalf("frame %#02x id %d inside the answer to %d", uint8(next.Type), next.ID, f.ID)
		}
		for _, fl := range next.Fields {
			if !listTag(fl.Tag) && fl.Tag != TagMore {
				c.t.Fatalf("MORE with field %#02x", uint8(fl.Tag))
			}
		}
		f.Fields = append(f.Fields, next.Fields...)
	}
}

// expect reads the next frame and fails unless it is of type t.
func (c *client) expect(t Type) Frame {
	c.t.Helper()
	f := c.read()
	if f.Type != t {
		code, _ := f.Uint(TagCode)
		msg, _ := f.Get(TagMessage)
		c.t.Fatalf("got frame %#02x (id %d, code %v %q), want %#02x", uint8(f.Type), f.ID, Code(code), msg, uint8(t))
	}
	return f
}

// expectRefused reads a REFUSED of id with code.
func (c *client) expectRefused(id uint64, code Code) {
	c.t.Helper()
	f := c.expect(TypeRefused)
	got, _ := f.Uint(TagCode)
	if f.ID != id || Code(got) != code {
		msg, _ := f.Get(TagMessage)
		c.t.Fatalf("REFUSED id %d code %v (%q), want id %d code %v", f.ID, Code(got), msg, id, code)
	}
}

// closed reports whether the server has closed the connection.
func (c *client) closed() bool {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	_, err := io.ReadFull(c.c, b[:])
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// acquire sends an ACQUIRE of key with the extra fields.
func (c *client) acquire(key string, fields ...func(*frameBuilder)) uint64 {
	c.t.Helper()
	return c.send(TypeAcquire, append([]func(*frameBuilder){func(fb *frameBuilder) { fb.str(TagKey, key) }}, fields...)...)
}

// granted reads a GRANTED of id and returns its token.
func (c *client) granted(id uint64) uint64 {
	c.t.Helper()
	f := c.expect(TypeGranted)
	tok, _ := f.Uint(TagToken)
	if f.ID != id || tok == 0 {
		c.t.Fatalf("GRANTED id %d token %d, want id %d", f.ID, tok, id)
	}
	return tok
}

// release sends a RELEASE of key's lock token and reads its OK.
func (c *client) release(key string, token uint64) {
	c.t.Helper()
	id := c.send(TypeRelease, func(fb *frameBuilder) { fb.str(TagKey, key) }, func(fb *frameBuilder) { fb.u64(TagToken, token) })
	if f := c.expect(TypeOK); f.ID != id {
		c.t.Fatalf("OK of id %d, want %d", f.ID, id)
	}
}

func wait(ms uint32) func(*frameBuilder)  { return func(fb *frameBuilder) { fb.u32(TagWait, ms) } }
func lease(ms uint32) func(*frameBuilder) { return func(fb *frameBuilder) { fb.u32(TagLease, ms) } }
func delay(ms uint32) func(*frameBuilder) { return func(fb *frameBuilder) { fb.u32(TagDelay, ms) } }
func ttl(ms uint32) func(*frameBuilder)   { return func(fb *frameBuilder) { fb.u32(TagTTL, ms) } }

// v1 sends a v1 request and returns its connection.
func (e *env) v1(t *testing.T, action oneshot.Action, key, source string) net.Conn {
	t.Helper()
	c := e.connect(t)
	if _, err := c.Write(oneshot.AppendRequest(nil, oneshot.Request{Action: action, Key: key, Source: source})); err != nil {
		t.Fatal(err)
	}
	return c
}

// v1Answer reads a v1 answer.
func v1Answer(t *testing.T, c net.Conn) byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("v1 answer: %v", err)
	}
	return b[0]
}

// eventually polls cond until it holds, failing after 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func parked(n *mutex.Node, key string) int { return n.Describe(key).Queue }

// be64 encodes a u64 for a raw field.
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// heldJournal makes every command durable at once until hold, and from
// then on holds them all until release.
type heldJournal struct {
	mu   sync.Mutex
	done chan struct{} // nil: durable at once
}

func (j *heldJournal) Append(*mutex.Command) mutex.Pending {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.done == nil {
		return nil
	}
	return heldPending(j.done)
}

func (j *heldJournal) hold() {
	j.mu.Lock()
	j.done = make(chan struct{})
	j.mu.Unlock()
}

func (j *heldJournal) release() {
	j.mu.Lock()
	if j.done != nil {
		close(j.done)
		j.done = nil
	}
	j.mu.Unlock()
}

type heldPending chan struct{}

func (p heldPending) Done() <-chan struct{} { return p }
func (p heldPending) Wait() error           { <-p; return nil }
