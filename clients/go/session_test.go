package lockingcenter_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/session"
)

func TestSessionAcquireRelease(t *testing.T) {
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	s := srv.open(lockingcenter.WithSource("billing"), lockingcenter.WithDialer(tn.dial))
	if s.ID() == 0 || s.TTL() != session.DefaultTTL {
		t.Fatalf("session %d with TTL %v", s.ID(), s.TTL())
	}
	l := mustAcquire(t, s, "s/k")
	h, held := srv.node.Holder("s/k")
	if !held || h.Token != l.Token() || h.Session != s.ID() || h.Source != "billing" || l.Key() != "s/k" {
		t.Fatalf("holder %+v, lock token %d", h, l.Token())
	}
	if ended(l.Done()) || l.Cause() != nil {
		t.Fatalf("a held lock has ended: %v", l.Cause())
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if !ended(l.Done()) || !errors.Is(l.Cause(), lockingcenter.ErrLockReleased) {
		t.Fatalf("after Release: cause %v", l.Cause())
	}
	if _, held := srv.node.Holder("s/k"); held {
		t.Fatal("the key is held after Release")
	}
	// A second Release returns the first's result and sends nothing.
	before := tn.written.Load()
	if err := l.Release(); err != nil || tn.written.Load() != before {
		t.Fatalf("second Release: %v, %d bytes written", err, tn.written.Load()-before)
	}
	l2 := mustAcquire(t, s, "s/k")
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l.Token())
	}
	other := mustAcquire(t, s, "s/other")
	if other.Token() <= l2.Token() {
		t.Fatalf("token %d of another key after %d", other.Token(), l2.Token())
	}
}

func TestSessionTryOnceAndWait(t *testing.T) {
	srv := startServer(t, serverOptions{})
	a, b := srv.open(), srv.open()
	l := mustAcquire(t, a, "w/k")
	_, err := b.Acquire(context.Background(), "w/k", lockingcenter.TryOnce())
	if !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("TryOnce of a held key: %v, want ErrBusy", err)
	}
	_, err = b.Acquire(context.Background(), "w/k", lockingcenter.WithWait(20*time.Millisecond))
	if !errors.Is(err, lockingcenter.ErrTimeout) || errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("WithWait on a held key: %v, want ErrTimeout", err)
	}
	if n := srv.node.Describe("w/k").Queue; n != 0 {
		t.Fatalf("%d requests left in the queue", n)
	}
	l.Release()
	if _, err := b.Acquire(context.Background(), "w/k", lockingcenter.TryOnce()); err != nil {
		t.Fatalf("TryOnce of a free key: %v", err)
	}
	for _, key := range []string{"", strings.Repeat("k", 128)} {
		if _, err := b.Acquire(context.Background(), key); !errors.Is(err, lockingcenter.ErrInvalidKey) {
			t.Fatalf("Acquire of %d bytes: %v", len(key), err)
		}
	}
	_, err = b.Acquire(context.Background(), "w/k", lockingcenter.WithOwner(strings.Repeat("o", 128)))
	if !errors.Is(err, lockingcenter.ErrInvalidOwner) {
		t.Fatalf("a long owner: %v", err)
	}
	if _, err := lockingcenter.NewSession(context.Background(), srv.addr,
		lockingcenter.WithSource(strings.Repeat("s", 128))); !errors.Is(err, lockingcenter.ErrInvalidSource) {
		t.Fatalf("a long name: %v", err)
	}
}

// Cancelling the context of a waiting Acquire takes the request out of the
// queue: the waiter behind it gets the key, and gets the very next token.
func TestSessionCancelWithdraws(t *testing.T) {
	srv := startServer(t, serverOptions{})
	a, b, c := srv.open(), srv.open(), srv.open()
	l, ctx, cancel, gone, next := queueTwo(t, srv, "c/k", a, b, c)
	cancel()
	if got := receive(t, "the cancelled Acquire", gone); !errors.Is(got.err, context.Canceled) || got.lock != nil {
		t.Fatalf("cancelled Acquire: %v", got.err)
	}
	srv.waitQueue("c/k", 1)
	l.Release()
	got := receive(t, "the next waiter", next)
	if got.err != nil || got.lock.Token() != l.Token()+1 {
		t.Fatalf("next waiter: %v, token %d after %d", got.err, got.lock.Token(), l.Token())
	}
	// An Acquire whose context has ended sends nothing.
	if _, err := b.Acquire(ctx, "c/other"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context: %v", err)
	}
}

// queueTwo has a hold key, then b wait for it under a context to cancel,
// then c wait behind b. The channels deliver the outcomes of the waits.
func queueTwo(t *testing.T, srv *lockServer, key string, a, b, c *lockingcenter.Session) (
	held *lockingcenter.Lock, ctx context.Context, cancel func(), gone, next <-chan acquired) {
	t.Helper()
	held = mustAcquire(t, a, key)
	ctx, cancel = context.WithCancel(context.Background())
	t.Cleanup(cancel)
	gone = acquireAsync(ctx, b, key)
	srv.waitQueue(key, 1)
	next = acquireAsync(context.Background(), c, key)
	srv.waitQueue(key, 2)
	return held, ctx, cancel, gone, next
}

// A grant that crosses the cancel is released by the client.
func TestSessionCancelCrossesGrant(t *testing.T) {
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	a, b, c := srv.open(), srv.open(lockingcenter.WithDialer(tn.dial)), srv.open()
	l, _, cancel, gone, next := queueTwo(t, srv, "x/k", a, b, c)
	tn.holdReads() // b's GRANTED waits in its socket while b gives up
	l.Release()
	eventually(t, "the grant to b", func() bool {
		h, ok := srv.node.Holder("x/k")
		return ok && h.Session == b.ID()
	})
	cancel()
	if got := receive(t, "the cancelled Acquire", gone); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v", got.err)
	}
	tn.releaseReads()
	if got := receive(t, "the next waiter", next); got.err != nil {
		t.Fatal(got.err)
	}
}

// The lock keeps the values of Acquire's context, not its end.
func TestSessionLockValues(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := srv.open()
	type traceKey struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), traceKey{}, "trace-7"))
	l, err := s.Acquire(ctx, "v/k")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if l.Value(traceKey{}) != "trace-7" {
		t.Fatalf("Value = %v", l.Value(traceKey{}))
	}
	mustAcquire(t, s, "v/later") // a round trip after the cancel
	if ended(l.Done()) {
		t.Fatalf("cancelling Acquire's context ended the lock: %v", l.Cause())
	}
}

// A lease that the server ends reaches the lock as ErrLeaseExpired; the
// session goes on.
func TestSessionLeaseLostOnServer(t *testing.T) {
	nodeClock := newFakeClock()
	srv := startServer(t, serverOptions{clock: nodeClock})
	s := srv.open(lockingcenter.WithClock(newFakeClock())) // the client's own deadline never comes
	l := mustAcquire(t, s, "l/k", lockingcenter.WithLease(time.Second))
	srv.advance(999 * time.Millisecond)
	mustAcquire(t, s, "l/other") // a round trip
	if ended(l.Done()) {
		t.Fatal("lost before its lease ran out")
	}
	srv.advance(time.Millisecond)
	receive(t, "the end of the lock", l.Done())
	if c := l.Cause(); !errors.Is(c, lockingcenter.ErrLockLost) || !errors.Is(c, lockingcenter.ErrLeaseExpired) {
		t.Fatalf("cause %v", c)
	}
	if err := l.Release(); !errors.Is(err, lockingcenter.ErrLockLost) {
		t.Fatalf("Release of a lost lock: %v", err)
	}
	if err := l.Renew(context.Background()); !errors.Is(err, lockingcenter.ErrLockLost) {
		t.Fatalf("Renew of a lost lock: %v", err)
	}
	mustAcquire(t, s, "l/k")
}

// The client ends a leased lock by its own clock before the server can,
// and Renew moves that end.
func TestSessionLeaseClientDeadline(t *testing.T) {
	srv := startServer(t, serverOptions{clock: newFakeClock()})
	clk := newFakeClock()
	s := srv.open(lockingcenter.WithClock(clk))
	l := mustAcquire(t, s, "d/k", lockingcenter.WithLease(time.Second))
	endsAfter(t, clk, l, 900*time.Millisecond) // the lease less its margin: max(1 s / 10, 50 ms)
	if c := l.Cause(); !errors.Is(c, lockingcenter.ErrLeaseExpired) {
		t.Fatalf("cause %v", c)
	}
	// Given up, the lock is released by its token (the server's clock has
	// not moved: only the client's RELEASE can free the key).
	eventually(t, "the given-up lock released", func() bool { _, held := srv.node.Holder("d/k"); return !held })

	// Its RELEASE carries lapse, so that a lock-delay holds: the key ends
	// as its lease would, and a try of another session is busy (a plain
	// release would have let it in).
	dl := mustAcquire(t, s, "d/delayed", lockingcenter.WithLease(time.Second), lockingcenter.WithLockDelay(time.Minute))
	endsAfter(t, clk, dl, 900*time.Millisecond)
	eventually(t, "the given-up lock ended", func() bool { _, held := srv.node.Holder("d/delayed"); return !held })
	other := srv.open(lockingcenter.WithClock(newFakeClock()))
	if l, err := other.Acquire(context.Background(), "d/delayed", lockingcenter.TryOnce()); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("a try in the lock-delay of a lock given up: %v %v, want ErrBusy", l, err)
	}

	r := mustAcquire(t, s, "d/renewed", lockingcenter.WithLease(time.Second))
	clk.Advance(800 * time.Millisecond)
	if err := r.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	endsAfter(t, clk, r, 900*time.Millisecond)
}

// endsAfter moves clk d on and checks that l ends then: held a
// millisecond before, ended at d.
func endsAfter(t *testing.T, clk *fakeClock, l *lockingcenter.Lock, d time.Duration) {
	t.Helper()
	clk.Advance(d - time.Millisecond)
	if ended(l.Done()) {
		t.Fatalf("ended before %v: %v", d, l.Cause())
	}
	clk.Advance(time.Millisecond)
	if !ended(l.Done()) {
		t.Fatalf("held %v on", d)
	}
}

// A dropped connection is resumed: the lock stays, a parked request keeps
// its place, the grant made while away arrives, and a request whose bytes
// never reached the server is sent again.
func TestSessionResume(t *testing.T) {
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	a := srv.open(lockingcenter.WithSource("a"), lockingcenter.WithDialer(tn.dial))
	b := srv.open()
	held := mustAcquire(t, a, "r/held")
	bLater := mustAcquire(t, b, "r/later")
	bParked := mustAcquire(t, b, "r/parked")
	later := acquireAsync(context.Background(), a, "r/later")
	parked := acquireAsync(context.Background(), a, "r/parked")
	srv.waitQueue("r/later", 1)
	srv.waitQueue("r/parked", 1)

	tn.mute() // the next request is lost on the way
	resent := acquireAsync(context.Background(), a, "r/resent")
	receive(t, "the acquire written", tn.dropped)
	tn.block()
	tn.cut()
	srv.waitDetached(a.ID())
	if err := bLater.Release(); err != nil {
		t.Fatal(err)
	}
	if h, _ := srv.node.Holder("r/later"); h.Session != a.ID() {
		t.Fatalf("r/later went to %+v, not to the session away", h)
	}
	whileAway := acquireAsync(context.Background(), a, "r/while-away")
	tn.unblock()

	for what, ch := range map[string]<-chan acquired{"the grant made while away": later,
		"the request lost on the way": resent, "the request made while away": whileAway} {
		if got := receive(t, what, ch); got.err != nil {
			t.Fatalf("%s: %v", what, got.err)
		}
	}
	if err := bParked.Release(); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, "the parked request", parked); got.err != nil {
		t.Fatal(got.err)
	}
	if ended(held.Done()) {
		t.Fatalf("the held lock ended with the connection: %v", held.Cause())
	}
	if h, _ := srv.node.Holder("r/held"); h.Token != held.Token() {
		t.Fatalf("r/held: %+v, want token %d", h, held.Token())
	}
	if n := srv.node.Snapshot().Counters.Resumes; n != 1 {
		t.Fatalf("%d resumes", n)
	}
	if info, _ := srv.sessionInfo(a.ID()); info.Held != 5 || info.Parked != 0 {
		t.Fatalf("session holds %d and waits for %d, want 5 and 0", info.Held, info.Parked)
	}
}

// Answers lost with the connection: a grant is found in the resume's list
// (and not asked for twice), a lock lost meanwhile is seen lost.
func TestSessionResumeReconciles(t *testing.T) {
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	a := srv.open(lockingcenter.WithDialer(tn.dial))
	doomed := mustAcquire(t, a, "q/doomed")
	tn.deaf()
	granted := acquireAsync(context.Background(), a, "q/granted")
	eventually(t, "the grant", func() bool { _, ok := srv.node.Holder("q/granted"); return ok })
	srv.node.ResetKey("q/doomed") // its LOST goes nowhere
	tn.cut()
	got := receive(t, "the grant whose answer was lost", granted)
	if got.err != nil {
		t.Fatal(got.err)
	}
	if h, _ := srv.node.Holder("q/granted"); h.Token != got.lock.Token() {
		t.Fatalf("holder %+v, lock token %d", h, got.lock.Token())
	}
	receive(t, "the lock lost while away", doomed.Done())
	if !errors.Is(doomed.Cause(), lockingcenter.ErrLockLost) {
		t.Fatalf("cause %v", doomed.Cause())
	}
	mustAcquire(t, a, "q/after") // a round trip after the reconciliation
	if info, _ := srv.sessionInfo(a.ID()); info.Held != 2 || info.Parked != 0 {
		t.Fatalf("session holds %d and waits for %d, want 2 and 0", info.Held, info.Parked)
	}
}

// With the server out of reach, the client counts the session's locks
// lost at the TTL less the margin after the last answered sending, before
// the server can expire the session; the server, reached again, no longer
// knows the session and says so.
func TestSessionLostDeadline(t *testing.T) {
	nodeClock, clk := newFakeClock(), newFakeClock()
	srv := startServer(t, serverOptions{clock: nodeClock})
	tn := newTestNet()
	s := srv.open(lockingcenter.WithTTL(2*time.Second), lockingcenter.WithClock(clk), lockingcenter.WithDialer(tn.dial))
	l := mustAcquire(t, s, "e/k")
	waiting := acquireAsync(context.Background(), s, "e/k", lockingcenter.WithOwner("second"))
	srv.waitQueue("e/k", 1)
	tn.block()
	tn.stall()
	srv.advance(1799 * time.Millisecond)
	endsAfter(t, clk, l, 1800*time.Millisecond) // the TTL less its margin: max(2 s / 10, 50 ms)
	if c := l.Cause(); !errors.Is(c, lockingcenter.ErrLockLost) || !errors.Is(c, lockingcenter.ErrSessionExpired) {
		t.Fatalf("cause %v", c)
	}
	if got := receive(t, "the waiting acquire", waiting); !errors.Is(got.err, lockingcenter.ErrSessionExpired) {
		t.Fatalf("waiting Acquire: %v", got.err)
	}
	srv.advance(time.Millisecond)
	if _, ok := srv.sessionInfo(s.ID()); !ok {
		t.Fatal("the server expired the session before the client gave its lock up")
	}
	srv.advance(200 * time.Millisecond)
	if _, ok := srv.sessionInfo(s.ID()); ok {
		t.Fatal("the server kept the session past its TTL")
	}
	tn.unblock()
	receive(t, "the end of the session", s.Done())
	if !errors.Is(s.Err(), lockingcenter.ErrSessionExpired) {
		t.Fatalf("session error %v", s.Err())
	}
	if _, err := s.Acquire(context.Background(), "e/k"); !errors.Is(err, lockingcenter.ErrSessionExpired) {
		t.Fatalf("Acquire on an ended session: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close of an ended session: %v", err)
	}
}

// A session the client ended at its lost deadline, which the server still
// keeps when it can be reached again, is closed there: its lock goes to
// the next waiter and its waiting request leaves the queue, before the
// server's own TTL (its clock does not move here).
func TestSessionClosesWhatItGaveUp(t *testing.T) {
	nodeClock, clk := newFakeClock(), newFakeClock()
	srv := startServer(t, serverOptions{clock: nodeClock})
	tn := newTestNet()
	s := srv.open(lockingcenter.WithTTL(2*time.Second), lockingcenter.WithClock(clk), lockingcenter.WithDialer(tn.dial))
	other := srv.open(lockingcenter.WithClock(newFakeClock()))
	l := mustAcquire(t, s, "g/k")
	mustAcquire(t, srv.open(), "g/other")
	next := acquireAsync(context.Background(), other, "g/k")
	parked := acquireAsync(context.Background(), s, "g/other")
	srv.waitQueue("g/k", 1)
	srv.waitQueue("g/other", 1)
	tn.block()
	tn.stall()
	clk.Advance(1800 * time.Millisecond)
	if !ended(l.Done()) || !ended(s.Done()) {
		t.Fatal("held past the deadline")
	}
	if got := receive(t, "the parked acquire", parked); !errors.Is(got.err, lockingcenter.ErrSessionExpired) {
		t.Fatalf("parked Acquire: %v", got.err)
	}
	if _, ok := srv.sessionInfo(s.ID()); !ok {
		t.Fatal("the server no longer knows the session")
	}
	tn.unblock()
	if got := receive(t, "the key released by the CLOSE", next); got.err != nil {
		t.Fatal(got.err)
	}
	srv.waitQueue("g/other", 0)
	eventually(t, "the session closed on the server", func() bool { _, ok := srv.sessionInfo(s.ID()); return !ok })
	if !errors.Is(s.Err(), lockingcenter.ErrSessionExpired) {
		t.Fatalf("session error %v", s.Err())
	}
}

// The server's expiry reaches the session: GOODBYE session_expired, its
// locks lost; the lock-delay keeps the key from anyone for its length.
func TestSessionExpiredByServer(t *testing.T) {
	nodeClock := newFakeClock()
	srv := startServer(t, serverOptions{clock: nodeClock, cfg: session.Config{MinTTL: time.Second}})
	s := srv.open(lockingcenter.WithTTL(time.Second), lockingcenter.WithClock(newFakeClock()))
	other := srv.open()
	l := mustAcquire(t, s, "x/k", lockingcenter.WithLockDelay(500*time.Millisecond))
	srv.advance(time.Second)
	receive(t, "the end of the session", s.Done())
	if !errors.Is(s.Err(), lockingcenter.ErrSessionExpired) {
		t.Fatalf("session error %v", s.Err())
	}
	if c := l.Cause(); !errors.Is(c, lockingcenter.ErrLockLost) || !errors.Is(c, lockingcenter.ErrSessionExpired) {
		t.Fatalf("cause %v", c)
	}
	if _, err := other.Acquire(context.Background(), "x/k", lockingcenter.TryOnce()); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("TryOnce during the lock-delay: %v, want ErrBusy", err)
	}
	srv.advance(500 * time.Millisecond)
	mustAcquire(t, other, "x/k", lockingcenter.TryOnce())
}

// A server that stops says GOODBYE shutting_down; the session resumes on
// its restart, lock kept.
func TestSessionResumesAfterShutdown(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := srv.open(lockingcenter.WithConnectTimeout(time.Second))
	l := mustAcquire(t, s, "sd/k")
	srv.stop()
	srv.serve(srv.addr)
	mustAcquire(t, s, "sd/after") // waits for the resume
	if ended(l.Done()) {
		t.Fatalf("the lock ended with the restart: %v", l.Cause())
	}
	if n := srv.node.Snapshot().Counters.Resumes; n < 1 {
		t.Fatal("no resume")
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}

// Close releases every lock at once, orphaned ones too; waiting acquires
// fail; a second Close is harmless.
func TestSessionClose(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s, other := srv.open(), srv.open()
	kept := mustAcquire(t, s, "z/kept")
	orphan := mustAcquire(t, s, "z/orphan")
	orphan.Orphan()
	if !errors.Is(orphan.Cause(), lockingcenter.ErrLockOrphaned) || !ended(orphan.Done()) {
		t.Fatalf("orphan cause %v", orphan.Cause())
	}
	if err := orphan.Release(); !errors.Is(err, lockingcenter.ErrLockOrphaned) {
		t.Fatalf("Release of an orphan: %v", err)
	}
	if _, held := srv.node.Holder("z/orphan"); !held {
		t.Fatal("Orphan released the key")
	}
	waiting := acquireAsync(context.Background(), s, "z/kept", lockingcenter.WithOwner("second"))
	srv.waitQueue("z/kept", 1)
	next := acquireAsync(context.Background(), other, "z/orphan")
	srv.waitQueue("z/orphan", 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, "the waiting acquire", waiting); !errors.Is(got.err, lockingcenter.ErrSessionClosed) {
		t.Fatalf("waiting Acquire at Close: %v", got.err)
	}
	if got := receive(t, "the orphaned key", next); got.err != nil {
		t.Fatal(got.err)
	}
	if !ended(kept.Done()) || !errors.Is(kept.Cause(), lockingcenter.ErrLockReleased) || kept.Release() != nil {
		t.Fatalf("a lock at Close: cause %v", kept.Cause())
	}
	if !ended(s.Done()) || !errors.Is(s.Err(), lockingcenter.ErrSessionClosed) || s.Close() != nil {
		t.Fatalf("session after Close: %v", s.Err())
	}
	if _, err := s.Acquire(context.Background(), "z/k"); !errors.Is(err, lockingcenter.ErrSessionClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if _, held := srv.node.Holder("z/kept"); held || len(srv.node.Snapshot().Sessions) != 1 {
		t.Fatal("the session or its key outlived Close")
	}
}

// Close with the connection down resumes to send CLOSE.
func TestSessionCloseWhileAway(t *testing.T) {
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	s := srv.open(lockingcenter.WithDialer(tn.dial))
	mustAcquire(t, s, "za/k")
	tn.block()
	tn.cut()
	srv.waitDetached(s.ID())
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	tn.unblock()
	if err := receive(t, "Close", closed); err != nil {
		t.Fatal(err)
	}
	if _, held := srv.node.Holder("za/k"); held {
		t.Fatal("the key outlived Close")
	}
}

// The lock modes of the protocol, and their refusals.
func TestSessionModes(t *testing.T) {
	srv := startServer(t, serverOptions{})
	a, b, c := srv.open(), srv.open(), srv.open()
	ctx := context.Background()
	try := lockingcenter.TryOnce()

	reader := lockingcenter.WithOwner("reader")
	mustAcquire(t, a, "m/shared", lockingcenter.Shared(), reader)
	mustAcquire(t, b, "m/shared", lockingcenter.Shared(), try)
	if _, err := c.Acquire(ctx, "m/shared", try); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("exclusive try of a shared key: %v", err)
	}
	if _, err := a.Acquire(ctx, "m/shared", reader); !errors.Is(err, lockingcenter.ErrUpgrade) {
		t.Fatalf("a shared holder asking exclusively: %v", err)
	}

	two := lockingcenter.WithLimit(2)
	mustAcquire(t, a, "m/sem", two)
	mustAcquire(t, b, "m/sem", two, try)
	if _, err := c.Acquire(ctx, "m/sem", two, try); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("a third holder of a semaphore of 2: %v", err)
	}
	if _, err := c.Acquire(ctx, "m/sem", lockingcenter.WithLimit(3)); !errors.Is(err, lockingcenter.ErrLimitMismatch) ||
		!strings.Contains(err.Error(), "2") {
		t.Fatalf("another limit: %v", err)
	}

	r1 := mustAcquire(t, a, "m/re", lockingcenter.Reentrant(), lockingcenter.WithOwner("w1"))
	r2 := mustAcquire(t, a, "m/re", lockingcenter.Reentrant(), lockingcenter.WithOwner("w1"))
	if r1.Token() != r2.Token() {
		t.Fatalf("reentrant tokens %d and %d", r1.Token(), r2.Token())
	}
	if _, err := a.Acquire(ctx, "m/re", lockingcenter.Reentrant(), lockingcenter.WithOwner("w2"), try); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("another owner of the session: %v", err)
	}
	r1.Release()
	if h, held := srv.node.Holder("m/re"); !held || h.Count != 1 {
		t.Fatalf("after one release of two: %+v", h)
	}
	if ended(r2.Done()) {
		t.Fatal("releasing one count ended the other")
	}
	r2.Release()
	if _, held := srv.node.Holder("m/re"); held {
		t.Fatal("held after both releases")
	}

	// One owner for each session's acquires: each is then one node of
	// the server's graph of waits.
	own := lockingcenter.WithOwner("task")
	ax := mustAcquire(t, a, "m/x", own)
	mustAcquire(t, b, "m/y", own)
	bWaits := acquireAsync(ctx, b, "m/x", own)
	srv.waitQueue("m/x", 1)
	if _, err := a.Acquire(ctx, "m/y", own); !errors.Is(err, lockingcenter.ErrDeadlock) {
		t.Fatalf("closing a cycle of waits: %v", err)
	}
	ax.Release()
	receive(t, "b's grant", bWaits)

	p := mustAcquire(t, a, "m/prio")
	low := acquireAsync(ctx, b, "m/prio")
	srv.waitQueue("m/prio", 1)
	high := acquireAsync(ctx, c, "m/prio", lockingcenter.WithPriority(5))
	srv.waitQueue("m/prio", 2)
	p.Release()
	first := receive(t, "the high priority waiter", high)
	if first.err != nil {
		t.Fatal(first.err)
	}
	first.lock.Release()
	if got := receive(t, "the low priority waiter", low); got.err != nil || got.lock.Token() <= first.lock.Token() {
		t.Fatalf("low priority: %v", got.err)
	}
}

func TestSessionUnreachable(t *testing.T) {
	tn := newTestNet()
	srv := startServer(t, serverOptions{})
	addr := srv.addr
	srv.stop()
	_, err := lockingcenter.NewSession(context.Background(), addr, lockingcenter.WithDialer(tn.dial))
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("NewSession with no server: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := lockingcenter.NewSession(ctx, addr); !errors.Is(err, context.Canceled) {
		t.Fatalf("NewSession with a cancelled context: %v", err)
	}
}

// An idle session pings every keepalive, and lives on, lock and all, for
// many TTLs.
func TestSessionKeepalive(t *testing.T) {
	nodeClock, clk := newFakeClock(), newFakeClock()
	srv := startServer(t, serverOptions{clock: nodeClock})
	s := srv.open(lockingcenter.WithTTL(time.Second), lockingcenter.WithClock(clk))
	l := mustAcquire(t, s, "k/k")
	step := 400 * time.Millisecond // past the keepalive (334 ms), within the TTL
	for range 10 {
		srv.advance(step)
		clk.Advance(step)
		eventually(t, "a ping", func() bool {
			info, ok := srv.sessionInfo(s.ID())
			return ok && info.Idle == 0
		})
		// Its answer read before the next step: two steps with nothing
		// heard pass the silence bound, and the session drops the
		// connection (TestSessionSilentConnection).
		eventually(t, "the ping's answer", func() bool { return lockingcenter.Heard(s).Equal(clk.Now()) })
	}
	if ended(l.Done()) || s.Err() != nil {
		t.Fatalf("lock %v, session %v after 10 keepalives", l.Cause(), s.Err())
	}
	if h, _ := srv.node.Holder("k/k"); h.Token != l.Token() {
		t.Fatal("the lock is gone on the server")
	}
}

// Release gives up after the read timeout when no answer comes; the
// release goes out again once the connection is back.
func TestSessionReleaseReadTimeout(t *testing.T) {
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	s := srv.open(lockingcenter.WithDialer(tn.dial), lockingcenter.WithReadTimeout(50*time.Millisecond))
	other := srv.open()
	l := mustAcquire(t, s, "rt/k")
	next := acquireAsync(context.Background(), other, "rt/k")
	srv.waitQueue("rt/k", 1)
	tn.mute()
	err := l.Release()
	if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Fatalf("Release with no answer: %v", err)
	}
	if !errors.Is(l.Cause(), lockingcenter.ErrLockReleased) || l.Release() != err {
		t.Fatalf("after the timeout: cause %v", l.Cause())
	}
	tn.cut()
	if got := receive(t, "the key, released after the reconnect", next); got.err != nil {
		t.Fatal(got.err)
	}
}

// Without WithOwner each acquire is an owner of its own: goroutines that
// share a session queue for a key as clients of their own would, where
// one owner for the whole session refused the second ErrDeadlock.
func TestSessionAcquiresShareASession(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := srv.open()
	first := mustAcquire(t, s, "own/k")
	second := acquireAsync(context.Background(), s, "own/k")
	srv.waitQueue("own/k", 1)
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, "the second acquire of the session", second)
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.lock.Token() <= first.Token() {
		t.Fatalf("token %d after %d", got.lock.Token(), first.Token())
	}
	// A reentrant acquire without an owner takes the session's one owner.
	r1 := mustAcquire(t, s, "own/re", lockingcenter.Reentrant())
	r2 := mustAcquire(t, s, "own/re", lockingcenter.Reentrant())
	if r1.Token() != r2.Token() {
		t.Fatalf("reentrant tokens %d and %d", r1.Token(), r2.Token())
	}
}
