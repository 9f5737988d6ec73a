package lockingcenter_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
)

// serverAddr is the mutex port of the lock server that TestMain runs for
// the tests and examples of this package.
var (
	serverAddr string
	table      *mutex.Node
)

func TestMain(m *testing.M) {
	table = mutex.NewNode(mutex.NodeConfig{})
	srv, err := oneshot.NewServer(table, oneshot.ServerConfig{})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	serverAddr = ln.Addr().String()
	go srv.Serve(context.Background(), ln)
	code := m.Run()
	srv.Close()
	os.Exit(code)
}

func waitParked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for table.Snapshot().Parked != n {
		if time.Now().After(deadline) {
			t.Fatalf("parked = %d, want %d", table.Snapshot().Parked, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLockTryLockUnlock(t *testing.T) {
	ctx := context.Background()
	a := lockingcenter.New(serverAddr, lockingcenter.WithSource("a"))
	b := lockingcenter.New(serverAddr, lockingcenter.WithSource("b"))
	if err := a.Lock(ctx, "client/k"); err != nil {
		t.Fatal(err)
	}
	if err := b.TryLock(ctx, "client/k"); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("TryLock of held key = %v, want ErrBusy", err)
	}
	if err := b.Unlock(ctx, "client/k"); err != nil {
		t.Fatal(err)
	}
	if err := b.TryLock(ctx, "client/k"); err != nil {
		t.Fatalf("TryLock of free key = %v", err)
	}
	if g, _ := table.Holder("client/k"); g.Source != "b" {
		t.Fatalf("holder = %q", g.Source)
	}
	if err := a.ResetByKey(ctx, "client/k"); err != nil {
		t.Fatal(err)
	}
	if _, held := table.Holder("client/k"); held {
		t.Fatal("key held after reset")
	}
}

func TestCancelWithdrawsParkedLock(t *testing.T) {
	ctx := context.Background()
	c := lockingcenter.New(serverAddr)
	if err := c.Lock(ctx, "client/cancel"); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Lock(waitCtx, "client/cancel") }()
	waitParked(t, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v", err)
	}
	waitParked(t, 0)
	c.Unlock(ctx, "client/cancel")
	if _, held := table.Holder("client/cancel"); held {
		t.Fatal("cancelled request got the key")
	}
}

func TestWaitHoldsNothing(t *testing.T) {
	ctx := context.Background()
	c := lockingcenter.New(serverAddr)
	c.Lock(ctx, "client/wait")
	done := make(chan error, 1)
	go func() { done <- c.Wait(ctx, "client/wait") }()
	waitParked(t, 1)
	c.Unlock(ctx, "client/wait")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, held := table.Holder("client/wait"); held {
		t.Fatal("Wait left the key held")
	}
}

func TestResetBySourceFailsParkedLock(t *testing.T) {
	ctx := context.Background()
	holder := lockingcenter.New(serverAddr, lockingcenter.WithSource("h"))
	doomed := lockingcenter.New(serverAddr, lockingcenter.WithSource("doomed"))
	holder.Lock(ctx, "client/src")
	errc := make(chan error, 1)
	go func() { errc <- doomed.Lock(ctx, "client/src") }()
	waitParked(t, 1)
	if err := holder.ResetBySource(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, lockingcenter.ErrFailed) {
		t.Fatalf("withdrawn Lock = %v, want ErrFailed", err)
	}
	holder.Unlock(ctx, "client/src")
}

func TestFailuresAreNotBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c := lockingcenter.New(dead, lockingcenter.WithConnectTimeout(time.Second))
	err = c.TryLock(context.Background(), "k")
	if err == nil || errors.Is(err, lockingcenter.ErrBusy) || !strings.Contains(err.Error(), dead) {
		t.Fatalf("TryLock on a dead address = %v; want a failure naming it", err)
	}
	for _, key := range []string{"", strings.Repeat("k", 128)} {
		if err := c.Lock(context.Background(), key); !errors.Is(err, lockingcenter.ErrInvalidKey) {
			t.Fatalf("Lock(%d bytes) = %v, want ErrInvalidKey", len(key), err)
		}
	}
	long := lockingcenter.New(serverAddr, lockingcenter.WithSource(strings.Repeat("s", 128)))
	if err := long.Lock(context.Background(), "k"); !errors.Is(err, lockingcenter.ErrInvalidSource) {
		t.Fatalf("long source = %v", err)
	}
}

func TestContextDeadlineOnConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	err := lockingcenter.New(serverAddr).Lock(ctx, "client/deadline")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with an expired context = %v", err)
	}
}
