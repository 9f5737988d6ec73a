package lockingcenter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

// With no node answering (the server gone, the other address dead), the
// session ends on the client at its TTL less the margin after the last
// answered sending, however the reconnects go: Err and every call after
// say ErrSessionExpired, Done is closed, and nothing waits on.
func TestSessionEndsWhenNothingAnswers(t *testing.T) {
	srv := startServer(t, serverOptions{clock: newFakeClock()})
	clk := newFakeClock()
	s := srv.open(lockingcenter.WithTTL(3*time.Second), lockingcenter.WithClock(clk),
		lockingcenter.WithAddresses(lockingcenter.DeadAddr(t)))
	other := srv.open(lockingcenter.WithClock(newFakeClock()))
	mustAcquire(t, other, "n/k")
	l := mustAcquire(t, s, "n/held")
	waiting := acquireAsync(context.Background(), s, "n/k")
	srv.waitQueue("n/k", 1)
	srv.stop() // GOODBYE shutting_down; nothing listens any more
	for range 2699 {
		clk.Advance(time.Millisecond) // every reconnect and backoff of the session meanwhile
	}
	if err := s.Err(); err != nil || ended(s.Done()) || ended(l.Done()) {
		t.Fatalf("ended before the TTL less the margin (2.7 s): session %v, lock %v", err, l.Cause())
	}
	clk.Advance(time.Millisecond)
	if !ended(s.Done()) || !errors.Is(s.Err(), lockingcenter.ErrSessionExpired) {
		t.Fatalf("at 2.7 s: session %v", s.Err())
	}
	if c := l.Cause(); !errors.Is(c, lockingcenter.ErrLockLost) || !errors.Is(c, lockingcenter.ErrSessionExpired) {
		t.Fatalf("lock %v", c)
	}
	if got := receive(t, "the waiting acquire", waiting); !errors.Is(got.err, lockingcenter.ErrSessionExpired) {
		t.Fatalf("waiting Acquire: %v", got.err)
	}
	if _, err := s.Acquire(context.Background(), "n/k"); !errors.Is(err, lockingcenter.ErrSessionExpired) {
		t.Fatalf("Acquire after the end: %v", err)
	}
	if _, err := s.Describe(context.Background(), "n/k"); !errors.Is(err, lockingcenter.ErrSessionExpired) {
		t.Fatalf("Describe after the end: %v", err)
	}
	if _, err := s.Watch(context.Background(), "n/"); !errors.Is(err, lockingcenter.ErrSessionExpired) {
		t.Fatalf("Watch after the end: %v", err)
	}
	if err := l.Release(); !errors.Is(err, lockingcenter.ErrSessionExpired) {
		t.Fatalf("Release after the end: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close after the end: %v", err)
	}
}

// An acquire given up (its ctx cancelled) while the connection is down is
// withdrawn on the server before the session's next request of the key is
// applied: the next acquire queues behind the holder, and gets the key at
// its release, rather than being refused ErrDeadlock by its own old
// request.
func TestSessionReacquireAfterCancelWhileAway(t *testing.T) {
	srv := startServer(t, serverOptions{clock: newFakeClock()})
	clk := newFakeClock()
	tn := newTestNet()
	s := srv.open(lockingcenter.WithTTL(3*time.Second), lockingcenter.WithClock(clk), lockingcenter.WithDialer(tn.dial))
	other := srv.open(lockingcenter.WithClock(newFakeClock()))
	holder := mustAcquire(t, other, "rc/k")
	ctx, cancel := context.WithCancel(context.Background())
	first := acquireAsync(ctx, s, "rc/k")
	srv.waitQueue("rc/k", 1)
	tn.block()
	tn.cut()
	srv.waitDetached(s.ID())
	cancel()
	if got := receive(t, "the given-up acquire", first); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("given-up Acquire: %v", got.err)
	}
	w, err := other.Watch(context.Background(), "rc/")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	again := acquireAsync(context.Background(), s, "rc/k")
	tn.unblock()
	// The holder lets go only once the given-up request has left the
	// queue, so that no grant crosses its CANCEL.
	for {
		ev := receive(t, "the withdrawal of the given-up request", w.Events())
		if ev.Type == lockingcenter.EventWithdrawn && ev.Session == s.ID() {
			break
		}
	}
	select {
	case got := <-again:
		t.Fatalf("the re-acquire did not queue: %v", got.err)
	default:
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, "the re-acquire's grant", again)
	if got.err != nil {
		t.Fatalf("re-acquire: %v", got.err)
	}
	if got.lock.Token() <= holder.Token() {
		t.Fatalf("token %d, not above the holder's %d", got.lock.Token(), holder.Token())
	}
}

// A session that ends by the client's count (no answer within its TTL
// less the margin) is closed on the server once it can be reached, and
// its locks end as their leases running out would: a key keeps the
// lock-delay its acquire asked for, rather than being free at the CLOSE.
func TestSessionFarewellKeepsLockDelay(t *testing.T) {
	srv := startServer(t, serverOptions{clock: newFakeClock()})
	clk := newFakeClock()
	tn := newTestNet()
	s := srv.open(lockingcenter.WithTTL(3*time.Second), lockingcenter.WithClock(clk), lockingcenter.WithDialer(tn.dial))
	mustAcquire(t, s, "fw/delayed", lockingcenter.WithLockDelay(time.Minute))
	mustAcquire(t, s, "fw/plain")
	// Its lease ends here before the session does: its RELEASE with lapse
	// waits for a connection, and goes with the farewell.
	mustAcquire(t, s, "fw/leased", lockingcenter.WithLease(time.Second), lockingcenter.WithLockDelay(time.Minute))
	id := s.ID()
	tn.block()
	tn.cut()
	srv.waitDetached(id)
	for range 2700 {
		clk.Advance(time.Millisecond)
	}
	if !ended(s.Done()) || !errors.Is(s.Err(), lockingcenter.ErrSessionExpired) {
		t.Fatalf("at 2.7 s: session %v", s.Err())
	}
	if _, ok := srv.sessionInfo(id); !ok {
		t.Fatal("the server ended the session by itself; its clock was not moved")
	}
	tn.unblock()
	eventually(t, "the farewell's close", func() bool { _, ok := srv.sessionInfo(id); return !ok })
	other := srv.open(lockingcenter.WithClock(newFakeClock()))
	if l, err := other.Acquire(context.Background(), "fw/delayed", lockingcenter.TryOnce()); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("a try of a key in its lock-delay after the farewell: %v %v, want ErrBusy", l, err)
	}
	if l, err := other.Acquire(context.Background(), "fw/leased", lockingcenter.TryOnce()); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("a try of a key whose lease ended on the client, after the farewell: %v %v, want ErrBusy", l, err)
	}
	if _, err := other.Acquire(context.Background(), "fw/plain", lockingcenter.TryOnce()); err != nil {
		t.Fatalf("a try of a key without a lock-delay after the farewell: %v", err)
	}
}
