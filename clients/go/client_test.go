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
	"github.com/locking-center/locking-center/internal/silentserver"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
	"github.com/locking-center/locking-center/session"
)

// serverAddr is the mutex port of the lock server that TestMain runs for
// the tests and examples of this package: v1 and the session protocol.
var (
	serverAddr string
	table      *mutex.Node
)

func TestMain(m *testing.M) {
	table = mutex.NewNode(mutex.NodeConfig{})
	sessions, err := session.NewServer(table, session.Config{})
	if err != nil {
		panic(err)
	}
	srv, err := oneshot.NewServer(table, oneshot.ServerConfig{
		Handoff: &oneshot.Handoff{First: session.Preface[0], Serve: sessions.Serve}})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	serverAddr = ln.Addr().String()
	go srv.Serve(context.Background(), ln)
	// An answer means the accept loop and its goroutines run: tests that
	// check for leaked goroutines take them as there before they began.
	if err := lockingcenter.New(serverAddr).Unlock(context.Background(), "ready"); err != nil {
		panic(err)
	}
	code := m.Run()
	sessions.Close()
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

// fakeServer serves on 127.0.0.1 until the test ends and answers each
// request with answer(action byte); false, or a nil answer, leaves it
// unanswered.
func fakeServer(t *testing.T, answer func(action byte) (byte, bool)) string {
	t.Helper()
	s, err := silentserver.Listen("127.0.0.1:0", answer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.Addr()
}

func TestReadTimeoutEndsEveryCallThatDoesNotWait(t *testing.T) {
	c := lockingcenter.New(fakeServer(t, nil), lockingcenter.WithReadTimeout(50*time.Millisecond))
	// The context only keeps a client without a read timeout from hanging
	// the test: its end is not the error the calls must return.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, call := range map[string]func() error{
		"TryLock":       func() error { return c.TryLock(ctx, "k") },
		"Unlock":        func() error { return c.Unlock(ctx, "k") },
		"ResetByKey":    func() error { return c.ResetByKey(ctx, "k") },
		"ResetBySource": func() error { return c.ResetBySource(ctx, "s") },
	} {
		err := call()
		if !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, lockingcenter.ErrBusy) {
			t.Errorf("%s against a silent server = %v, want a read timeout", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "no answer within 50ms") {
			t.Errorf("%s: error %q does not name the read timeout", name, err)
		}
	}
}

func TestReadTimeoutBoundsTheReleaseOfWait(t *testing.T) {
	// The lock is granted at once; the unlock that follows is never answered.
	addr := fakeServer(t, func(action byte) (byte, bool) { return '+', action == 1 })
	c := lockingcenter.New(addr, lockingcenter.WithReadTimeout(50*time.Millisecond))
	errc := make(chan error, 1)
	go func() { errc <- c.Wait(context.Background(), "k") }()
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Wait whose release is never answered = %v, want a read timeout", err)
		}
	case <-time.After(10 * time.Second):
		// The release does not take the context's end, so without a
		// read timeout it would never return.
		t.Fatal("Wait whose release is never answered did not return")
	}
}

func TestLockHasNoReadTimeout(t *testing.T) {
	ctx := context.Background()
	holder := lockingcenter.New(serverAddr)
	if err := holder.Lock(ctx, "client/no-read-timeout"); err != nil {
		t.Fatal(err)
	}
	// A read timeout on the lock would end it before the grant, which
	// comes only once the request is parked.
	waiter := lockingcenter.New(serverAddr, lockingcenter.WithReadTimeout(time.Nanosecond))
	errc := make(chan error, 1)
	go func() { errc <- waiter.Lock(ctx, "client/no-read-timeout") }()
	waitParked(t, 1)
	if err := holder.Unlock(ctx, "client/no-read-timeout"); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Lock with a 1ns read timeout = %v, want the grant", err)
	}
	if err := holder.Unlock(ctx, "client/no-read-timeout"); err != nil {
		t.Fatal(err)
	}
}

func TestZeroReadTimeoutWaitsForTheContext(t *testing.T) {
	c := lockingcenter.New(fakeServer(t, nil), lockingcenter.WithReadTimeout(0))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.TryLock(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock without a read timeout = %v, want the context's deadline", err)
	}
}

// A client given several addresses takes each request to the first that
// accepts the connection, and names it in its errors.
func TestClientDialsTheNextAddress(t *testing.T) {
	dead := lockingcenter.DeadAddr(t)
	c := lockingcenter.New(dead + "," + serverAddr)
	ctx := context.Background()
	if err := c.TryLock(ctx, "addresses"); err != nil {
		t.Fatalf("trylock past a dead address: %v", err)
	}
	if err := c.Unlock(ctx, "addresses"); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	err := lockingcenter.New(dead+" , "+lockingcenter.DeadAddr(t)).Unlock(ctx, "addresses")
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("unlock with every address dead: %v", err)
	}
}

// An HTTP port named as the mutex port is said to be one.
func TestClientNamesAnHTTPAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		c.Close()
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	err = lockingcenter.New(ln.Addr().String()).Unlock(context.Background(), "k")
	if !errors.Is(err, lockingcenter.ErrProtocol) || !strings.Contains(err.Error(), "HTTP") {
		t.Fatalf("unlock at an HTTP port: %v", err)
	}
}
