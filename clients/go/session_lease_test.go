package lockingcenter_test

import (
	"context"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

// A leased acquire that waited longer than its lease counts the lease from
// its grant (the GRANTED's arrival less the 100 ms delivery bound, less
// the drift margin of a tenth): granted at 2 s, it ends at 2.8 s. Given up
// there, it is released by its token before the session's next request,
// so the session's next try of the key gets it, not ErrDeadlock.
func TestSessionLeaseFromGrant(t *testing.T) {
	srv := startServer(t, serverOptions{clock: newFakeClock()}) // the server's lease never ends here
	clk := newFakeClock()
	s := srv.open(lockingcenter.WithClock(clk))
	other := srv.open(lockingcenter.WithClock(newFakeClock()))
	holder := mustAcquire(t, other, "lg/k")
	waiting := acquireAsync(context.Background(), s, "lg/k", lockingcenter.WithLease(time.Second))
	srv.waitQueue("lg/k", 1)
	clk.Advance(2 * time.Second)
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, "the grant", waiting)
	if got.err != nil {
		t.Fatal(got.err)
	}
	if ended(got.lock.Done()) {
		t.Fatalf("lost at its grant: %v", got.lock.Cause())
	}
	endsAfter(t, clk, got.lock, 800*time.Millisecond)
	again, err := s.Acquire(context.Background(), "lg/k", lockingcenter.TryOnce())
	if err != nil {
		t.Fatalf("the next try of the key given up: %v", err)
	}
	if again.Token() <= got.lock.Token() {
		t.Fatalf("token %d, not above the given-up %d", again.Token(), got.lock.Token())
	}
}

// The lease of a GRANTED that took d to arrive is counted from the later
// of the request's sending and its arrival less 100 ms: a 1 s lease ends
// 900 ms after the request when the answer took 50 ms, and 800 ms after
// the arrival when it took 300 ms.
func TestSessionLeaseDeliveryBound(t *testing.T) {
	for _, tc := range []struct {
		delay, ends time.Duration // the answer's delay; the end after the arrival
	}{{50 * time.Millisecond, 850 * time.Millisecond}, {300 * time.Millisecond, 800 * time.Millisecond}} {
		t.Run(tc.delay.String(), func(t *testing.T) {
			srv := startServer(t, serverOptions{clock: newFakeClock()})
			clk := newFakeClock()
			tn := newTestNet()
			s := srv.open(lockingcenter.WithClock(clk), lockingcenter.WithDialer(tn.dial))
			tn.holdReads()
			granted := acquireAsync(context.Background(), s, "ld/k", lockingcenter.WithLease(time.Second))
			eventually(t, "the grant", func() bool { _, ok := srv.node.Holder("ld/k"); return ok })
			clk.Advance(tc.delay)
			tn.releaseReads()
			got := receive(t, "the grant", granted)
			if got.err != nil {
				t.Fatal(got.err)
			}
			endsAfter(t, clk, got.lock, tc.ends)
		})
	}
}
