package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

// openSession opens a session at addr, closed when the test ends.
func openSession(t *testing.T, addr string, opts ...lockingcenter.SessionOption) *lockingcenter.Session {
	t.Helper()
	s, err := lockingcenter.NewSession(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestHolders(t *testing.T) {
	srv := startServers(t)
	ctx := context.Background()
	if code, out := runProbe(t, time.Second, "holders", srv.manager, "probe/free"); code != exitOK || out != "" {
		t.Fatalf("holders of a free key: exit %d, %q", code, out)
	}
	a, b := openSession(t, srv.mutex), openSession(t, srv.mutex)
	note := "job 7 on host-3: ünïcode, spaces"
	la, err := a.Acquire(ctx, "probe/shared", lockingcenter.Shared(), lockingcenter.WithNote(note))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctx, "probe/shared", lockingcenter.Shared())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d %d %s\n%d %d", la.Token(), a.ID(), note, lb.Token(), b.ID())
	if code, out := runProbe(t, time.Second, "holders", srv.manager, "probe/shared"); code != exitOK || out != want {
		t.Fatalf("holders: exit %d,\n%s\nwant\n%s", code, out, want)
	}
}

// serveConns serves each connection to a port of 127.0.0.1 with handle,
// until the test ends, and returns its address.
func serveConns(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { handle(c); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// fakeFollower answers every management request '-', as a follower of a
// cluster answers a listing.
func fakeFollower(t *testing.T) string {
	return serveConns(t, func(c net.Conn) { c.Write([]byte("-")) })
}

// fakeCluster is a cluster's management ports as probe leader sees them:
// a node that is gone, a node frozen by SIGSTOP (it accepts, never
// answers), a follower, and the leader, in that order.
func fakeCluster(t *testing.T) []string {
	t.Helper()
	dead, _ := freeAddr()
	frozen := serving(t, "silent-server")
	return []string{dead, frozen, fakeFollower(t), startServers(t).manager}
}

func TestLeader(t *testing.T) {
	nodes := fakeCluster(t)
	start := time.Now()
	if code, out := runProbe(t, 10*time.Second, "leader", strings.Join(nodes, ",")); code != exitOK || out != "3" {
		t.Fatalf("leader: exit %d, %q, want 3", code, out)
	}
	if took := time.Since(start); took > askLimit+time.Second {
		t.Errorf("leader took %v with a frozen node: each question should be bounded by %v", took, askLimit)
	}
	if code, _ := runProbe(t, 100*time.Millisecond, "leader", strings.Join(nodes[:3], ",")); code != exitTimeout {
		t.Fatalf("leader of nodes that do not lead: exit %d, want %d", code, exitTimeout)
	}
}

func TestSignalLeader(t *testing.T) {
	nodes := fakeCluster(t)
	tp := newTestProbe(t, 10*time.Second)
	tp.env["LC_CLUSTER_MANAGER"] = strings.Join(nodes, ",")
	tp.env["LC_CLUSTER_PIDS"] = "101,102,103,104"
	if code, _ := tp.run(t, "signal-leader", "CONT"); code != exitError {
		t.Fatalf("CONT before any STOP: exit %d, want %d", code, exitError)
	}
	for _, step := range []struct {
		sig  string
		want sentSignal
	}{
		{"STOP", sentSignal{104, syscall.SIGSTOP}},
		{"CONT", sentSignal{104, syscall.SIGCONT}},
		{"KILL", sentSignal{104, syscall.SIGKILL}},
	} {
		tp.sent = nil
		if code, out := tp.run(t, "signal-leader", step.sig); code != exitOK || out != "3" {
			t.Fatalf("signal-leader %s: exit %d, %q, want 3", step.sig, code, out)
		}
		if len(tp.sent) != 1 || tp.sent[0] != step.want {
			t.Fatalf("signal-leader %s sent %v, want %v", step.sig, tp.sent, step.want)
		}
	}
	if _, err := os.Stat(filepath.Join(tp.state, stoppedFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stopped node's index is still kept after CONT: %v", err)
	}

	// CONT goes to the node STOP stopped, whoever leads since.
	tp.env["LC_CLUSTER_MANAGER"] = strings.Join([]string{nodes[3], nodes[2]}, ",")
	tp.env["LC_CLUSTER_PIDS"] = "201,202"
	tp.run(t, "signal-leader", "STOP")
	tp.env["LC_CLUSTER_MANAGER"] = strings.Join([]string{nodes[2], nodes[3]}, ",")
	tp.sent = nil
	if code, out := tp.run(t, "signal-leader", "CONT"); code != exitOK || out != "0" || len(tp.sent) != 1 || tp.sent[0].pid != 201 {
		t.Fatalf("CONT after the leader moved: exit %d, %q, sent %v; want node 0, pid 201", code, out, tp.sent)
	}

	tp.env["LC_CLUSTER_PIDS"] = "201"
	if code, _ := tp.run(t, "signal-leader", "KILL"); code != exitError {
		t.Errorf("two managers and one pid: exit %d, want %d", code, exitError)
	}
}

// echoServer echoes what each connection sends, until the test ends.
func echoServer(t *testing.T) string {
	return serveConns(t, func(c net.Conn) { io.Copy(c, c) })
}

// echo writes msg on c and reads it back.
func echo(c net.Conn, msg string) error {
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != msg {
		return fmt.Errorf("echoed %q, want %q", b, msg)
	}
	return nil
}

func TestProxyCut(t *testing.T) {
	checkLeaks(t)
	target := echoServer(t)
	addr, ctl, ok := strings.Cut(serving(t, "proxy", target), " ")
	if !ok {
		t.Fatalf("proxy printed no control address")
	}
	var conns []net.Conn
	for i := range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := echo(c, "before "+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if code, _ := runProbe(t, time.Second, "cut", ctl); code != exitOK {
		t.Fatalf("cut: exit %d", code)
	}
	for i, c := range conns {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("connection %d after the cut: %v, want a reset", i, err)
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := echo(c, "after"); err != nil {
		t.Fatalf("a new connection after the cut: %v", err)
	}
	if code, _ := runProbe(t, time.Second, "cut", fakeFollower(t)); code != exitError {
		t.Errorf("cut at a port that is no proxy's control: exit %d, want %d", code, exitError)
	}
}

func TestSessionLock(t *testing.T) {
	srv := startServers(t)
	ctx := context.Background()
	const key = "probe/session-lock"
	held, err := openSession(t, srv.mutex).Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	stdin, closeStdin := io.Pipe()
	out, w := io.Pipe()
	code := make(chan int, 1)
	var errOut strings.Builder
	p := &probe{stdin: stdin, stdout: w, limit: time.Second}
	go func() {
		code <- p.run(ctx, []string{"session-lock", srv.mutex, key}, &errOut)
		w.Close()
	}()
	if code, _ := runProbe(t, 10*time.Second, "waiters", srv.manager, key, "1"); code != exitOK {
		t.Fatalf("session-lock did not wait: waiters exit %d", code)
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("session-lock printed nothing: %v; stderr %q", err, errOut.String())
	}
	token, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(line), "granted "), 10, 64)
	if err != nil || !strings.HasPrefix(line, "granted ") || token <= held.Token() {
		t.Fatalf("session-lock printed %q, want granted and a token above %d", line, held.Token())
	}
	if _, out := runProbe(t, time.Second, "holders", srv.manager, key); !strings.HasPrefix(out, strconv.FormatUint(token, 10)+" ") {
		t.Fatalf("holders while session-lock holds %d: %q", token, out)
	}
	closeStdin.Close()
	if got := <-code; got != exitOK {
		t.Fatalf("session-lock exit %d once its input closed; stderr %q", got, errOut.String())
	}
	if _, out := runProbe(t, time.Second, "holders", srv.manager, key); out != "" {
		t.Fatalf("holders after session-lock ended: %q, want none", out)
	}
}
