package oneshot

import (
	"context"
	"github.com/locking-center/locking-center/mutex"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// After many parked waiters leave, the server holds no goroutine and no
// table entry for any of them.
func TestParkedWaitersLeaveNoGoroutines(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 connections")
	}
	const waiters = 10_000
	s := startServer(t, ServerConfig{})
	s.do(t, lockReq("hot", "holder"))
	baseline := goleak.IgnoreCurrent()
	// The waiters live in a child process: one process cannot hold both
	// ends of 10,000 connections under a 20,000 descriptor limit.
	child := startChild(t, childManyEnv, s.addr+" hot "+strconv.Itoa(waiters))
	s.waitParked(t, "hot", waiters)
	child.closeStdin() // the child closes every connection and exits
	child.wait(t)
	s.waitParked(t, "hot", 0)
	// Idle workers end within two seconds of their last connection.
	eventually(t, "goroutines back to baseline", func() bool { return goleak.Find(baseline) == nil })
	goleak.VerifyNone(t, baseline, goleak.IgnoreAnyFunction("runtime.runCleanups"))
	if got := s.table.Snapshot().Parked; got != 0 {
		t.Fatalf("parked = %d", got)
	}
	s.do(t, Request{Action: ActionUnlock, Key: "hot"})
	if n := s.table.Len(); n != 0 {
		t.Fatalf("table has %d keys, want 0", n)
	}
}

func TestMillionKeysLeaveEmptyTable(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 10_000
	}
	tb := newNode()
	ctx := context.Background()
	for i := range n {
		key := strconv.Itoa(i)
		if _, err := tb.Lock(ctx, mutex.Claim{Key: key, Source: "s"}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			tb.Release(key)
		}
	}
	for i := 1; i < n; i += 2 {
		tb.Release(strconv.Itoa(i))
	}
	if got := tb.Len(); got != 0 {
		t.Fatalf("table has %d keys after every key was released", got)
	}
	if got := tb.Snapshot().Parked; got != 0 {
		t.Fatalf("registry has %d entries", got)
	}
}
