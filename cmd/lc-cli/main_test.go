package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/auth"
	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
	"github.com/locking-center/locking-center/session"
)

// Stamps the test binary is built with.
const (
	testVersion = "1.2.3-test"
	testCommit  = "abc1234"
)

// binary is lc-cli built by TestMain.
var binary string

// patience bounds every wait for an observable condition in these tests.
const patience = 20 * time.Second

// helperEnv names the role in which the test binary runs as a helper
// process of a test instead of running tests: one of helpers.
const helperEnv = "LC_CLI_TEST_HELPER"

// helpers are the roles of the test binary as a helper process; each
// returns the process's exit code.
var helpers = map[string]func() int{
	"outer": func() int { return signalReporter("outer") },
	"inner": func() int { return signalReporter("inner") },
}

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(helpers[role]())
	}
	dir, err := os.MkdirTemp("", "lc-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "lc-cli")
	build := exec.Command(goTool(), "build", "-o", binary,
		"-ldflags", fmt.Sprintf("-X main.version=%s -X main.commit=%s", testVersion, testCommit), ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build lc-cli:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goTool is the go command: on PATH, else the toolchain's own.
func goTool() string {
	if gobin, err := exec.LookPath("go"); err == nil {
		return gobin
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// signalReporter is a command for the tests of signal delivery. As
// "outer" it starts an "inner" copy of itself, in its own process group;
// each prints "<role> ready" once it catches the relayed signals, then
// "<role> got <signal>" for the first one. The inner exits 0, the outer
// waits for it and exits 3.
func signalReporter(role string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, relayedSignals...)
	var inner *exec.Cmd
	if role == "outer" {
		inner = exec.Command(os.Args[0])
		inner.Env = append(os.Environ(), helperEnv+"=inner")
		inner.Stdout, inner.Stderr = os.Stdout, os.Stderr
		if err := inner.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 99
		}
	}
	fmt.Printf("%s ready\n", role)
	fmt.Printf("%s got %v\n", role, <-sigs)
	if inner != nil {
		inner.Wait()
		return 3
	}
	return 0
}

// testServer is a live lock server on 127.0.0.1: the mutex port and the
// management port over one table.
type testServer struct {
	table       *mutex.Node
	mutexSrv    *oneshot.Server
	sessionSrv  *session.Server
	managerSrv  *manager.Server
	addr        string // mutex port
	managerAddr string // management port
	closeOnce   sync.Once
	served      sync.WaitGroup
}

// startServer starts a server that stops when the test ends. now, if not
// nil, is the table's clock.
func startServer(t *testing.T, now func() time.Time) *testServer {
	t.Helper()
	return startServerOn(t, listen(t), listen(t), now)
}

// startServerOn is startServer on the listeners given.
func startServerOn(t *testing.T, mutexLn, managerLn net.Listener, now func() time.Time) *testServer {
	t.Helper()
	return startServerAuth(t, mutexLn, managerLn, now, nil)
}

// startServerAuth is startServerOn with authentication on when tokens is
// not nil: v1 off, tokens asked of sessions and of the management port.
func startServerAuth(t *testing.T, mutexLn, managerLn net.Listener, now func() time.Time, tokens *auth.Tokens) *testServer {
	t.Helper()
	var sessCfg session.Config
	var mgrCfg manager.Config
	var v1Allowed func(net.IP) bool
	if tokens != nil {
		sessCfg.Tokens, mgrCfg.Tokens = tokens, tokens
		v1Allowed = func(net.IP) bool { return false }
	}
	log := slog.New(slog.NewTextHandler(tLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := &testServer{table: mutex.NewNode(mutex.NodeConfig{Clock: now})}
	t.Cleanup(s.table.Close)
	var err error
	sessCfg.Logger, mgrCfg.Logger = log, log
	if s.sessionSrv, err = session.NewServer(s.table, sessCfg); err != nil {
		t.Fatal(err)
	}
	handoff := &oneshot.Handoff{First: session.Preface[0], Serve: s.sessionSrv.Serve}
	if s.mutexSrv, err = oneshot.NewServer(s.table, oneshot.ServerConfig{Logger: log, Handoff: handoff, V1Allowed: v1Allowed}); err != nil {
		t.Fatal(err)
	}
	s.managerSrv = manager.NewServer(s.table, mgrCfg)
	s.addr, s.managerAddr = mutexLn.Addr().String(), managerLn.Addr().String()
	s.served.Go(func() { s.mutexSrv.Serve(context.Background(), mutexLn) })
	s.served.Go(func() { s.managerSrv.Serve(context.Background(), managerLn) })
	t.Cleanup(s.close)
	return s
}

// close stops both ports and waits for them.
func (s *testServer) close() {
	s.closeOnce.Do(func() {
		s.sessionSrv.Close()
		s.mutexSrv.Close()
		s.managerSrv.Close()
		s.served.Wait()
	})
}

// environ points lc-cli at s through its environment variables.
func (s *testServer) environ() []string {
	return []string{"LC_ADDRESS=" + s.addr, "LC_MANAGER_ADDRESS=" + s.managerAddr}
}

// client is a Go client of s with the given source.
func (s *testServer) client(source string) *lockingcenter.Client {
	return lockingcenter.New(s.addr, lockingcenter.WithSource(source))
}

// holders lists the held keys through the management port.
func (s *testServer) holders(t *testing.T) map[string]manager.Holder {
	t.Helper()
	m := &manager.Client{Addr: s.managerAddr}
	hs, err := m.Holders(context.Background())
	if err != nil {
		t.Fatalf("list holders: %v", err)
	}
	out := make(map[string]manager.Holder, len(hs))
	for _, h := range hs {
		out[h.Key] = h
	}
	return out
}

// hold makes source the holder of key, through the mutex port.
func (s *testServer) hold(t *testing.T, key, source string) {
	t.Helper()
	if err := s.client(source).TryLock(context.Background(), key); err != nil {
		t.Fatalf("hold %q: %v", key, err)
	}
}

// release unlocks key through the mutex port.
func (s *testServer) release(t *testing.T, key string) {
	t.Helper()
	if err := s.client("").Unlock(context.Background(), key); err != nil {
		t.Errorf("unlock %q: %v", key, err)
	}
}

// waitWaiters waits until key has n requests queued behind its holder.
func (s *testServer) waitWaiters(t *testing.T, key string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d waiters on %q", n, key), func() bool {
		h, ok := s.holders(t)[key]
		return ok && h.Waiters == n
	})
}

// waitFree waits until nobody holds key and nobody waits for it.
func (s *testServer) waitFree(t *testing.T, key string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%q free", key), func() bool {
		_, held := s.holders(t)[key]
		return !held
	})
}

// eventually polls cond until it holds, failing the test after patience.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// closedAddr returns a 127.0.0.1 address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln := listen(t)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// tLogWriter sends server logs to t.Log.
type tLogWriter struct{ t *testing.T }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// result is how one lc-cli run ended.
type result struct {
	code           exitCode
	stdout, stderr string
}

// lcRun is one lc-cli run under way, driven in process or as the built
// binary.
type lcRun interface {
	signal(sig os.Signal)     // deliver sig to lc-cli
	output() string           // its stdout so far
	wait(t *testing.T) result // wait for it to end
}

// mode is one way of running lc-cli: start starts it with the test's
// environment without LC_ variables, plus environ.
type mode struct {
	name  string
	start func(t *testing.T, environ []string, args ...string) lcRun
}

// modes drive lc-cli in process through execute, and as the built binary
// with real signals.
var modes = []mode{
	{"in-process", func(t *testing.T, environ []string, args ...string) lcRun {
		return startInProcess(t, environ, args...)
	}},
	{"binary", func(t *testing.T, environ []string, args ...string) lcRun {
		return startBinary(t, environ, args...)
	}},
}

// inProcess is one lc-cli run driven through execute.
type inProcess struct {
	args    []string
	signals chan os.Signal
	out     syncBuffer
	errOut  syncBuffer
	done    chan exitCode
}

// startInProcess starts execute(args) in a goroutine with no stdin.
func startInProcess(t *testing.T, environ []string, args ...string) *inProcess {
	t.Helper()
	return startInProcessWith(t, environ, nil, args...)
}

// startInProcessWith is startInProcess with stdin.
func startInProcessWith(t *testing.T, environ []string, stdin io.Reader, args ...string) *inProcess {
	t.Helper()
	p := &inProcess{args: args, signals: make(chan os.Signal, 4), done: make(chan exitCode, 1)}
	sys := system{
		Stdin: stdin, Stdout: &p.out, Stderr: &p.errOut,
		Environ: append(withoutLC(os.Environ()), environ...), Hostname: "testhost",
		Signals: p.signals, Location: time.UTC,
	}
	go func() { p.done <- execute(args, sys) }()
	return p
}

func (p *inProcess) signal(sig os.Signal) { p.signals <- sig }
func (p *inProcess) output() string       { return p.out.String() }

func (p *inProcess) wait(t *testing.T) result {
	t.Helper()
	select {
	case code := <-p.done:
		return result{code: code, stdout: p.out.String(), stderr: p.errOut.String()}
	case <-time.After(patience):
		t.Fatalf("lc-cli %q did not end; stderr: %s", p.args, p.errOut.String())
		return result{}
	}
}

// runInProcess runs lc-cli through execute to its end.
func runInProcess(t *testing.T, environ []string, args ...string) result {
	t.Helper()
	return startInProcess(t, environ, args...).wait(t)
}

// withoutLC returns environ without lc-cli's own variables.
func withoutLC(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "LC_") {
			out = append(out, kv)
		}
	}
	return out
}

// binaryRun is one run of the built lc-cli.
type binaryRun struct {
	cmd    *exec.Cmd
	out    syncBuffer
	errOut syncBuffer
}

// startBinary starts the built lc-cli.
func startBinary(t *testing.T, environ []string, args ...string) *binaryRun {
	t.Helper()
	r := &binaryRun{cmd: exec.Command(binary, args...)}
	r.cmd.Env = append(withoutLC(os.Environ()), environ...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.errOut
	// A process left behind holding the output pipes must not hang the
	// test; the test checks for such processes itself.
	r.cmd.WaitDelay = 2 * time.Second
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
	})
	return r
}

func (r *binaryRun) signal(sig os.Signal) { r.cmd.Process.Signal(sig) }
func (r *binaryRun) output() string       { return r.out.String() }

func (r *binaryRun) wait(t *testing.T) result {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(patience):
		r.cmd.Process.Kill()
		<-done
		t.Fatalf("lc-cli %q did not exit; stderr: %s", r.cmd.Args, r.errOut.String())
	}
	return result{code: exitCode(r.cmd.ProcessState.ExitCode()), stdout: r.out.String(), stderr: r.errOut.String()}
}

// runBinary runs the built lc-cli to its end.
func runBinary(t *testing.T, environ []string, args ...string) result {
	t.Helper()
	return startBinary(t, environ, args...).wait(t)
}

// oneLine checks that stderr is exactly one line holding every part.
func oneLine(t *testing.T, stderr string, parts ...string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") || !strings.HasPrefix(stderr, "lc-cli: ") {
		t.Errorf("stderr is not one lc-cli line: %q", stderr)
	}
	for _, p := range parts {
		if !strings.Contains(stderr, p) {
			t.Errorf("stderr %q does not mention %q", stderr, p)
		}
	}
}
