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
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
	"github.com/locking-center/locking-center/session"
	"go.uber.org/goleak"
)

// servers are one table served on 127.0.0.1:0 until the test ends: the
// mutex port (v1, and the session protocol handed off from it) and the
// management port.
type servers struct {
	node           *mutex.Node
	mutex, manager string
}

// startServers serves an empty table.
func startServers(t *testing.T) servers {
	t.Helper()
	return startServersOn(t, nil)
}

// startServersOn serves table, a table read back from a log; nil starts
// empty.
func startServersOn(t *testing.T, table *mutex.Table) servers {
	t.Helper()
	checkLeaks(t)
	node := mutex.NewNode(mutex.NodeConfig{Table: table})
	t.Cleanup(node.Close)
	ss, err := session.NewServer(node, session.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := oneshot.NewServer(node, oneshot.ServerConfig{
		Handoff: &oneshot.Handoff{First: session.Preface[0], Serve: ss.Serve}})
	if err != nil {
		t.Fatal(err)
	}
	mg := manager.NewServer(node, manager.Config{})
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
	t.Cleanup(func() { ss.Close(); ms.Close(); mg.Close(); <-done; <-done })
	return servers{node: node, mutex: lm.Addr().String(), manager: lg.Addr().String()}
}

// checkLeaks fails the test if it leaves goroutines behind. It runs after
// every cleanup registered later (servers, sessions).
func checkLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt, goleak.IgnoreAnyFunction("runtime.runCleanups")) }) // the runtime's cleanups (unique's) run on a goroutine of their own
}

// testProbe is a probe with the test's limit, environment and state
// directory, whose signals go to sent.
type testProbe struct {
	probe
	env  map[string]string
	sent []sentSignal
}

type sentSignal struct {
	pid int
	sig syscall.Signal
}

func newTestProbe(t *testing.T, limit time.Duration) *testProbe {
	tp := &testProbe{env: map[string]string{}}
	tp.probe = probe{stdin: strings.NewReader(""), limit: limit, state: t.TempDir(),
		getenv: func(k string) string { return tp.env[k] },
		signal: func(pid int, sig syscall.Signal) error {
			tp.sent = append(tp.sent, sentSignal{pid, sig})
			return nil
		}}
	return tp
}

// run runs the probe with args and returns its exit code and what it
// printed, trimmed.
func (tp *testProbe) run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	tp.stdout = &out
	code := tp.probe.run(context.Background(), args, &errOut)
	t.Logf("probe %q: exit %d, stderr %q", args, code, errOut.String())
	return code, strings.TrimSpace(out.String())
}

func runProbe(t *testing.T, limit time.Duration, args ...string) (int, string) {
	t.Helper()
	return newTestProbe(t, limit).run(t, args...)
}

func TestHolderAndWaiters(t *testing.T) {
	srv := startServers(t)
	addr, mgr := srv.mutex, srv.manager
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
	mgr := startServers(t).manager
	dead, _ := freeAddr()
	for _, args := range [][]string{
		nil,
		{"waiters", mgr, "k"},
		{"waiters", mgr, "k", "-1"},
		{"waiters", mgr, "k", "x"},
		{"holder", mgr, "zz"},
		{"holder", dead, "6b"},
		{"waiters", dead, "k", "0"},
		{"holders", dead, "k"},
		{"leader", ""},
		{"signal-leader", "HUP"},
		{"signal-leader", "KILL"}, // no cluster in the environment
		{"signal-leader", "CONT"},
		{"cut", dead},
		{"session-lock", dead, "k"},
		{"big-token-wal", filepath.Join(t.TempDir(), "no", "such", "dir")},
		{"tls-files", filepath.Join(t.TempDir(), "missing")},
		{"unknown"},
	} {
		if code, _ := runProbe(t, time.Second, args...); code != exitError {
			t.Errorf("probe %q: exit %d, want %d", args, code, exitError)
		}
	}
}

// serving runs a probe command that serves until its context ends
// (silent-server, proxy) and returns the line it printed first; the
// command stops, and must exit 0, when the test ends.
func serving(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	var errOut bytes.Buffer
	code := make(chan int, 1)
	p := &probe{stdout: w, limit: time.Second}
	go func() {
		code <- p.run(ctx, args, &errOut)
		w.Close()
	}()
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("probe %q printed nothing: %v", args, err)
	}
	go io.Copy(io.Discard, r) // until the command ends and closes w
	t.Cleanup(func() {
		cancel()
		if got := <-code; got != exitOK {
			t.Errorf("probe %q: exit %d after its context ended, stderr %q", args, got, errOut.String())
		}
	})
	return strings.TrimSpace(line)
}

func TestSilentServerNeverAnswers(t *testing.T) {
	checkLeaks(t)
	addr := serving(t, "silent-server")
	c := lockingcenter.New(addr, lockingcenter.WithReadTimeout(50*time.Millisecond))
	if err := c.TryLock(context.Background(), "k"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("trylock at the silent server = %v, want a read timeout", err)
	}
}
