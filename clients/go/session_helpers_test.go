package lockingcenter_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
	"github.com/locking-center/locking-center/session"
	"go.uber.org/goleak"
)

// fakeClock is a clock that a test moves by hand: for the node, whose
// clock decides expiry on the server, and for a session, whose clock
// decides when the client counts its locks lost.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc runs f once the clock has been moved d on. A timer already
// due runs in a goroutine of its own, as time.AfterFunc does.
func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	if d <= 0 {
		t.done = true
		go f()
	} else {
		c.timers = append(c.timers, t)
	}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.done
		t.done = true
		return was
	}
}

// pending returns how many timers are set and not yet run or stopped.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

// Advance moves the clock d on and runs, in this goroutine and in the
// order of their times, the timers that are then due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		live := c.timers[:0]
		for _, t := range c.timers {
			if t.done {
				continue
			}
			live = append(live, t)
			if !t.at.After(c.now) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		c.timers = live
		if next != nil {
			next.done = true
		}
		c.mu.Unlock()
		if next == nil {
			return
		}
		next.f()
	}
}

// lockServer is a node served on 127.0.0.1 through the mutex port, v1
// and the session protocol on one listener, for one test.
type lockServer struct {
	t     *testing.T
	node  *mutex.Node
	clock *fakeClock // nil: the node's own
	cfg   session.Config
	tls   *tls.Config // the mutex port's; nil: plain TCP
	addr  string

	sessions *session.Server
	v1       *oneshot.Server
	served   chan error
}

type serverOptions struct {
	clock *fakeClock
	cfg   session.Config
	tls   *tls.Config // the mutex port's; nil: plain TCP
}

func startServer(t *testing.T, o serverOptions) *lockServer {
	t.Helper()
	checkLeaks(t)
	var now func() time.Time
	if o.clock != nil {
		now = o.clock.Now
	}
	o.cfg.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := &lockServer{t: t, node: mutex.NewNode(mutex.NodeConfig{Clock: now}), clock: o.clock, cfg: o.cfg, tls: o.tls}
	srv.serve("127.0.0.1:0")
	t.Cleanup(func() {
		srv.stop()
		srv.node.Close()
	})
	return srv
}

// serve starts the front ends on addr.
func (srv *lockServer) serve(addr string) {
	t := srv.t
	t.Helper()
	var err error
	if srv.sessions, err = session.NewServer(srv.node, srv.cfg); err != nil {
		t.Fatal(err)
	}
	srv.v1, err = oneshot.NewServer(srv.node, oneshot.ServerConfig{Logger: srv.cfg.Logger, TLS: srv.tls,
		SourceFromCert: srv.cfg.SourceFromCert, Handoff: &oneshot.Handoff{First: session.Preface[0], Serve: srv.sessions.Serve}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv.addr = ln.Addr().String()
	srv.served = make(chan error, 1)
	go func(v1 *oneshot.Server, done chan error) { done <- v1.Serve(context.Background(), ln) }(srv.v1, srv.served)
}

// stop stops the front ends (GOODBYE shutting_down to every session); the
// node and its sessions stay.
func (srv *lockServer) stop() {
	if srv.sessions == nil {
		return
	}
	srv.sessions.Close()
	srv.v1.Close()
	<-srv.served
	srv.sessions = nil
}

// advance moves the node's clock d on and lets the node act on it.
func (srv *lockServer) advance(d time.Duration) {
	srv.clock.Advance(d)
	srv.node.Advance()
}

// sessionInfo returns the node's record of session id.
func (srv *lockServer) sessionInfo(id uint64) (mutex.SessionInfo, bool) {
	for _, s := range srv.node.Snapshot().Sessions {
		if s.ID == id {
			return s, true
		}
	}
	return mutex.SessionInfo{}, false
}

// waitQueue waits until n requests wait for key on the server.
func (srv *lockServer) waitQueue(key string, n int) {
	srv.t.Helper()
	eventually(srv.t, "the queue of "+key, func() bool { return srv.node.Describe(key).Queue == n })
}

// waitDetached waits until the server has seen session id's connection go.
func (srv *lockServer) waitDetached(id uint64) {
	srv.t.Helper()
	eventually(srv.t, "the session detached", func() bool {
		s, ok := srv.sessionInfo(id)
		return ok && s.RemoteAddr == ""
	})
}

// open opens a session on srv, closed at the test's end.
func (srv *lockServer) open(opts ...lockingcenter.SessionOption) *lockingcenter.Session {
	srv.t.Helper()
	s, err := lockingcenter.NewSession(context.Background(), srv.addr, opts...)
	if err != nil {
		srv.t.Fatal(err)
	}
	srv.t.Cleanup(func() { s.Close() })
	return s
}

// eventually polls a condition on the server, which has no channel to
// wait on, failing after 30 s.
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

// receive returns what ch delivers, failing after 30 s.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// ended reports whether ch is closed now.
func ended(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// acquireAsync runs Acquire in a goroutine; the channel delivers its
// outcome.
func acquireAsync(ctx context.Context, s *lockingcenter.Session, key string, opts ...lockingcenter.AcquireOption) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := s.Acquire(ctx, key, opts...)
		ch <- acquired{l, err}
	}()
	return ch
}

type acquired struct {
	lock *lockingcenter.Lock
	err  error
}

// mustAcquire takes key or fails the test.
func mustAcquire(t *testing.T, s *lockingcenter.Session, key string, opts ...lockingcenter.AcquireOption) *lockingcenter.Lock {
	t.Helper()
	l, err := s.Acquire(context.Background(), key, opts...)
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	return l
}

// checkLeaks fails the test if it leaves goroutines behind. It runs after
// every cleanup registered later (servers, sessions).
func checkLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt, goleak.IgnoreAnyFunction("runtime.runCleanups")) }) // the runtime's cleanups (unique's) run on a goroutine of their own
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// testNet is a dialer (WithDialer) whose connections the test controls:
// it can hold dials, cut the connections, and make them drop what is
// written (mute), drop what arrives (deaf), or hold what arrives.
type testNet struct {
	mu      sync.Mutex
	conns   []*testConn
	gate    chan struct{} // not nil: dials wait until it is closed
	hold    chan struct{} // not nil: reads wait until it is closed
	dials   int
	written atomic.Int64
	dropped chan struct{} // a write was dropped
}

func newTestNet() *testNet { return &testNet{dropped: make(chan struct{}, 100)} }

func (n *testNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	gate := n.gate
	n.dials++
	n.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &testConn{Conn: nc, n: n, closed: make(chan struct{})}
	n.mu.Lock()
	n.conns = append(n.conns, c)
	n.mu.Unlock()
	return c, nil
}

// dialled returns how many dials were made.
func (n *testNet) dialled() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dials
}

// block holds every dial from now on; unblock lets them through.
func (n *testNet) block()   { n.shut(&n.gate) }
func (n *testNet) unblock() { n.open(&n.gate) }

// holdReads keeps what arrives on the connections from the client until
// releaseReads.
func (n *testNet) holdReads()    { n.shut(&n.hold) }
func (n *testNet) releaseReads() { n.open(&n.hold) }

func (n *testNet) shut(gate *chan struct{}) {
	n.mu.Lock()
	*gate = make(chan struct{})
	n.mu.Unlock()
}

func (n *testNet) open(gate *chan struct{}) {
	n.mu.Lock()
	close(*gate)
	*gate = nil
	n.mu.Unlock()
}

func (n *testNet) each(f func(*testConn)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.conns {
		f(c)
	}
}

// cut closes every connection so far.
func (n *testNet) cut() { n.each(func(c *testConn) { c.Close() }) }

// mute drops what the client writes on the connections so far; deaf drops
// what reaches it; stall does both.
func (n *testNet) mute()  { n.each(func(c *testConn) { c.mute.Store(true) }) }
func (n *testNet) deaf()  { n.each(func(c *testConn) { c.deaf.Store(true) }) }
func (n *testNet) stall() { n.mute(); n.deaf() }

type testConn struct {
	net.Conn
	n          *testNet
	mute, deaf atomic.Bool
	closeOnce  sync.Once
	closed     chan struct{}
}

func (c *testConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *testConn) Write(b []byte) (int, error) {
	if c.mute.Load() {
		select {
		case c.n.dropped <- struct{}{}:
		default:
		}
		return len(b), nil
	}
	n, err := c.Conn.Write(b)
	c.n.written.Add(int64(n))
	return n, err
}

func (c *testConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		c.n.mu.Lock()
		hold := c.n.hold
		c.n.mu.Unlock()
		if hold != nil && err == nil {
			select {
			case <-hold:
			case <-c.closed:
				return 0, net.ErrClosed
			}
		}
		if err != nil || !c.deaf.Load() {
			return n, err
		}
	}
}
