package lockingcenter_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

// A connection that brings nothing for the keepalive plus its margin is
// dead: with a TTL of 3 s (keepalive 1 s, margin 250 ms) the session pings
// at 1 s, keeps the connection at 1.249 s, drops it at 1.25 s and resumes,
// lock kept.
func TestSessionSilentConnection(t *testing.T) {
	srv := startServer(t, serverOptions{clock: newFakeClock()}) // expires nothing, however long the test takes
	clk := newFakeClock()
	tn := newTestNet()
	s := srv.open(lockingcenter.WithTTL(3*time.Second), lockingcenter.WithClock(clk), lockingcenter.WithDialer(tn.dial))
	l := mustAcquire(t, s, "si/k")
	tn.deaf()
	written := tn.written.Load()
	clk.Advance(time.Second)
	eventually(t, "the ping", func() bool { return tn.written.Load() > written })
	clk.Advance(249 * time.Millisecond)
	if n := tn.dialled(); n != 1 {
		t.Fatalf("%d dials within the silence bound", n)
	}
	clk.Advance(time.Millisecond)
	eventually(t, "a new connection", func() bool { return tn.dialled() == 2 })
	mustAcquire(t, s, "si/after") // on the resumed connection
	if ended(l.Done()) {
		t.Fatalf("the lock ended: %v", l.Cause())
	}
	if h, _ := srv.node.Holder("si/k"); h.Token != l.Token() {
		t.Fatalf("holder %+v, want token %d", h, l.Token())
	}
}

// The node whose connection went silent goes to the back of the addresses
// and is shunned for as long again: a follower that still names it as
// the leader (it has not noticed yet) is not followed there, and the
// session tries the other addresses until the shunning ends.
func TestSessionSilentNodeShunned(t *testing.T) {
	srv := startServer(t, serverOptions{clock: newFakeClock()}) // expires nothing, however long the test takes
	f := startFollower(t, srv.addr)
	clk := newFakeClock()
	tn := newTestNet()
	s, err := lockingcenter.NewSession(context.Background(), srv.addr+","+f.addr, lockingcenter.WithTTL(3*time.Second),
		lockingcenter.WithClock(clk), lockingcenter.WithDialer(tn.dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l := mustAcquire(t, s, "sh/k")
	tn.deaf()
	written := tn.written.Load()
	clk.Advance(time.Second)
	eventually(t, "the ping", func() bool { return tn.written.Load() > written })
	clk.Advance(250 * time.Millisecond) // silent: srv shunned until 2.5 s
	// While it looks for a leader, the session's timers are its lost
	// deadline and its backoff.
	backoff := func() { eventually(t, "the backoff", func() bool { return clk.pending() == 2 }) }
	eventually(t, "the follower asked", func() bool { return f.conns.Load() == 1 })
	for range 2 { // each backoff ends within 250 ms; the follower is asked again
		n := f.conns.Load()
		backoff()
		clk.Advance(250 * time.Millisecond)
		eventually(t, "the follower asked again", func() bool { return f.conns.Load() == n+1 })
	}
	backoff()
	if atLeader := int64(tn.dialled()) - f.conns.Load(); atLeader != 1 {
		t.Fatalf("%d dials of the shunned node, want only the first", atLeader-1)
	}
	clk.Advance(750 * time.Millisecond) // 2.5 s: the shunning ends, the lost deadline (2.7 s) not yet
	if got := receive(t, "an acquire after the resume", acquireAsync(context.Background(), s, "sh/after")); got.err != nil {
		t.Fatal(got.err)
	}
	if ended(l.Done()) || s.Err() != nil {
		t.Fatalf("lock %v, session %v", l.Cause(), s.Err())
	}
	if h, _ := srv.node.Holder("sh/k"); h.Token != l.Token() {
		t.Fatalf("holder %+v, want token %d", h, l.Token())
	}
}

// frozenNode accepts connections (as the kernel of a stopped process
// does) and never reads or answers them.
func frozenNode(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 100)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			ch <- struct{}{}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), ch
}

// A node that takes the connection and answers nothing costs a handshake
// no more than the silence bound, whatever the read and connect timeouts:
// NewSession goes on to the next address, and so does a resume.
func TestSessionFrozenNodeBounded(t *testing.T) {
	srv := startServer(t, serverOptions{})
	frozen, accepted := frozenNode(t)
	opts := []lockingcenter.SessionOption{lockingcenter.WithTTL(6 * time.Second),
		lockingcenter.WithReadTimeout(time.Hour), lockingcenter.WithConnectTimeout(time.Hour)}
	opened := make(chan error, 1)
	var s *lockingcenter.Session
	go func() {
		var err error
		s, err = lockingcenter.NewSession(context.Background(), frozen+","+srv.addr, opts...)
		opened <- err
	}()
	if err := receive(t, "NewSession past the frozen node", opened); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	receive(t, "the frozen node's connection", accepted)

	l := mustAcquire(t, s, "fz/k")
	srv.stop() // the session resumes: srv refuses, then the frozen node
	receive(t, "the frozen node's second connection", accepted)
	srv.serve(srv.addr)
	mustAcquire(t, s, "fz/after")
	if s.Err() != nil {
		t.Fatalf("session %v", s.Err())
	}
	if h, _ := srv.node.Holder("fz/k"); h.Token != l.Token() {
		t.Fatalf("holder %+v, want token %d", h, l.Token())
	}
}
