package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
)

// startServers serves one table on a mutex port and a management port,
// both on 127.0.0.1:0, until the test ends.
func startServers(t *testing.T) (mutexAddr, managerAddr string) {
	t.Helper()
	table := mutex.NewNode(mutex.NodeConfig{})
	t.Cleanup(table.Close)
	ms, err := oneshot.NewServer(table, oneshot.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mg := manager.NewServer(table, manager.Config{})
	lm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lg, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { ms.Serve(context.Background(), lm); done <- struct{}{} }()
	go func() { mg.Serve(context.Background(), lg); done <- struct{}{} }()
	t.Cleanup(func() { ms.Close(); mg.Close(); <-done; <-done })
	return lm.Addr().String(), lg.Addr().String()
}

func runProbe(t *testing.T, limit time.Duration, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut, limit)
	t.Logf("probe %v: exit %d, stderr %q", args, code, errOut.String())
	return code, strings.TrimSpace(out.String())
}

func TestHolderAndWaiters(t *testing.T) {
	addr, mgr := startServers(t)
	ctx := context.Background()
	key := "probe/\x00\xff"
	hexKey := hex.EncodeToString([]byte(key))

	if code, out := runProbe(t, time.Second, "holder", mgr, hexKey); code != exitOK || out != "free" {
		t.Fatalf("holder of a free key: exit %d, %q", code, out)
	}
	if code, _ := runProbe(t, time.Second, "waiters", mgr, key, "0"); code != exitOK {
		t.Fatalf("waiters 0 on a free key: exit %d", code)
	}
	holder := lockingcenter.New(addr, lockingcenter.WithSource("probe-holder"))
	if err := holder.Lock(ctx, key); err != nil {
		t.Fatal(err)
	}
	if code, out := runProbe(t, time.Second, "holder", mgr, hexKey); code != exitOK || out != "probe-holder" {
		t.Fatalf("holder: exit %d, %q", code, out)
	}

	waiterErr := make(chan error, 1)
	go func() { waiterErr <- lockingcenter.New(addr).Lock(ctx, key) }()
	if code, _ := runProbe(t, 10*time.Second, "waiters", mgr, key, "1"); code != exitOK {
		t.Fatalf("waiters 1: exit %d", code)
	}
	if code, _ := runProbe(t, 50*time.Millisecond, "waiters", mgr, key, "2"); code != exitTimeout {
		t.Fatalf("waiters 2 with one parked: exit %d, want %d", code, exitTimeout)
	}
	if err := holder.Unlock(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := <-waiterErr; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if err := holder.Unlock(ctx, key); err != nil {
		t.Fatal(err)
	}
}

func TestFreeAddrRefuses(t *testing.T) {
	code, addr := runProbe(t, time.Second, "free-addr")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	err := lockingcenter.New(addr).Lock(context.Background(), "k")
	if err == nil || errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("lock at %s: %v, want a failure", addr, err)
	}
}

func TestUsageAndErrors(t *testing.T) {
	_, mgr := startServers(t)
	dead, _ := freeAddr()
	for _, args := range [][]string{
		nil,
		{"waiters", mgr, "k"},
		{"waiters", mgr, "k", "-1"},
		{"waiters", mgr, "k", "x"},
		{"holder", mgr, "zz"},
		{"holder", dead, "6b"},
		{"waiters", dead, "k", "0"},
		{"unknown"},
	} {
		if code, _ := runProbe(t, time.Second, args...); code != exitError {
			t.Errorf("probe %q: exit %d, want %d", args, code, exitError)
		}
	}
}

func TestSilentServerNeverAnswers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	var errOut bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"silent-server"}, w, &errOut, time.Second)
		w.Close()
	}()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no address printed: %v", err)
	}
	c := lockingcenter.New(strings.TrimSpace(addr), lockingcenter.WithReadTimeout(50*time.Millisecond))
	if err := c.TryLock(context.Background(), "k"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("trylock at the silent server = %v, want a read timeout", err)
	}
	cancel()
	if got := <-code; got != exitOK {
		t.Fatalf("silent-server exit %d after its context ended, stderr %q", got, errOut.String())
	}
}
