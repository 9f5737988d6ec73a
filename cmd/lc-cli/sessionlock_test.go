package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/locking-center/locking-center/manager"
)

// sessionHolder waits until key is held through a session and returns its
// holder.
func (s *testServer) sessionHolder(t *testing.T, key string) manager.Holder {
	t.Helper()
	var h manager.Holder
	eventually(t, "a session to hold "+key, func() bool {
		var ok bool
		h, ok = s.holders(t)[key]
		return ok && h.Session != 0
	})
	return h
}

// fifo makes a named pipe in a temporary directory: a command that reads it
// blocks until the test writes a line.
func fifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// release writes a line to the fifo, letting its reader go on.
func releaseFifo(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
}

func TestLockCommandGetsTheTokenAndTheKey(t *testing.T) {
	s := startServer(t, nil)
	var tokens []uint64
	for range 3 {
		r := runInProcess(t, s.environ(), "lock", "deploy/prod", "--", "sh", "-c", `echo "$LC_LOCK_KEY $LC_FENCING_TOKEN"`)
		key, token, ok := strings.Cut(strings.TrimSpace(r.stdout), " ")
		n, err := strconv.ParseUint(token, 10, 64)
		if r.code != exitOK || !ok || key != "deploy/prod" || err != nil || n == 0 {
			t.Fatalf("lock -- printed %q (exit %d, stderr %q), want the key and a token", r.stdout, r.code, r.stderr)
		}
		tokens = append(tokens, n)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("tokens %v do not increase", tokens)
		}
	}
	if hs := s.holders(t); len(hs) != 0 {
		t.Errorf("keys left held: %v", hs)
	}
}

func TestLockCommandHoldsThroughASession(t *testing.T) {
	s := startServer(t, nil)
	gate := fifo(t)
	p := startInProcess(t, append(s.environ(), "LC_SOURCE=job-7"), "lock", "--ttl", "3s", "k", "--",
		"sh", "-c", `read x < "$0"; echo "$LC_FENCING_TOKEN"`, gate)
	h := s.sessionHolder(t, "k")
	if h.Source != "job-7" {
		t.Errorf("the session's source is %q, want job-7", h.Source)
	}
	m := &manager.Client{Addr: s.managerAddr}
	ss, err := m.Sessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 || ss[0].TTL.Seconds() != 3 {
		t.Errorf("sessions %+v, want one with a TTL of 3s", ss)
	}
	releaseFifo(t, gate)
	r := p.wait(t)
	if r.code != exitOK || strings.TrimSpace(r.stdout) != strconv.FormatUint(h.Token, 10) {
		t.Errorf("exit %d, printed %q; want 0 and the holder's token %d (stderr %q)", r.code, r.stdout, h.Token, r.stderr)
	}
	if ss, _ := m.Sessions(context.Background()); len(ss) != 0 {
		t.Errorf("sessions left open: %+v", ss)
	}
}

func TestLockLostStopsTheCommand(t *testing.T) {
	s := startServer(t, nil)
	p := startInProcess(t, s.environ(), "lock", "k", "--", "sh", "-c", `trap 'echo stopped; exit 0' TERM; echo ready; sleep 1000 & wait`)
	s.sessionHolder(t, "k")
	eventually(t, "the command to set its trap", func() bool { return strings.Contains(p.output(), "ready") })
	m := &manager.Client{Addr: s.managerAddr}
	if err := m.ResetKey(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t)
	if r.code != exitFailure || !strings.Contains(r.stdout, "stopped") {
		t.Errorf("exit %d, printed %q; want 2 after the command got SIGTERM", r.code, r.stdout)
	}
	oneLine(t, r.stderr, `lock of "k" lost`, "reset took it", "the command was stopped")
}

func TestSharedLocksRunTogether(t *testing.T) {
	s := startServer(t, nil)
	gate := fifo(t)
	first := startInProcess(t, s.environ(), "lock", "--shared", "report", "--", "sh", "-c", `read x < "$0"`, gate)
	s.sessionHolder(t, "report")
	if r := runInProcess(t, s.environ(), "lock", "--shared", "report", "--", "true"); r.code != exitOK {
		t.Errorf("a second shared lock = %d %q, want 0 beside the first", r.code, r.stderr)
	}
	releaseFifo(t, gate)
	if r := first.wait(t); r.code != exitOK {
		t.Errorf("first shared lock = %d %q", r.code, r.stderr)
	}
}

func TestSemaphoreLetsLimitHoldersIn(t *testing.T) {
	s := startServer(t, nil)
	gates := []string{fifo(t), fifo(t)}
	var holders []*inProcess
	for _, g := range gates {
		holders = append(holders, startInProcess(t, s.environ(), "lock", "--limit", "2", "pool", "--", "sh", "-c", `read x < "$0"`, g))
	}
	eventually(t, "two holders of pool", func() bool {
		hs, err := (&manager.Client{Addr: s.managerAddr}).Holders(context.Background())
		n := 0
		for _, h := range hs {
			if h.Key == "pool" {
				n++
			}
		}
		return err == nil && n == 2
	})
	third := startInProcess(t, s.environ(), "lock", "--limit", "2", "pool", "--", "echo", "third")
	s.waitWaiters(t, "pool", 1)
	releaseFifo(t, gates[0])
	if r := third.wait(t); r.code != exitOK || r.stdout != "third\n" {
		t.Errorf("third = %d %q %q", r.code, r.stdout, r.stderr)
	}
	releaseFifo(t, gates[1])
	for _, h := range holders {
		if r := h.wait(t); r.code != exitOK {
			t.Errorf("holder = %d %q", r.code, r.stderr)
		}
	}
	if r := runInProcess(t, s.environ(), "lock", "--limit", "3", "pool", "--", "true"); r.code != exitOK {
		t.Errorf("a free key takes a new limit: %d %q", r.code, r.stderr)
	}
}

func TestSessionFlagsNeedACommand(t *testing.T) {
	env, accepted := hangingUp(t)
	for _, args := range [][]string{
		{"lock", "--ttl", "5s", "k"}, {"lock", "--shared", "k"}, {"lock", "--limit", "2", "k"},
		{"lock", "--priority", "1", "k"}, {"lock", "--lock-delay", "1s", "k"}, {"lock", "--note", "n", "k"},
	} {
		r := runInProcess(t, env, args...)
		if r.code != exitFailure {
			t.Errorf("%q = %d, want 2", args, r.code)
		}
		oneLine(t, r.stderr, "need a command")
	}
	for _, note := range []string{"\xff", strings.Repeat("n", 1025)} {
		r := runInProcess(t, env, "lock", "--note", note, "k", "--", "true")
		if r.code != exitFailure {
			t.Errorf("a note of %d bytes = %d, want 2", len(note), r.code)
		}
		oneLine(t, r.stderr, "--note must be UTF-8 of at most 1024 bytes")
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("%d connections made for usage errors", n)
	}
}

// lock --note: the holder's note is kept with the lock while the command
// runs, and keys -d shows it.
func TestLockNote(t *testing.T) {
	s := startServer(t, nil)
	gate := fifo(t)
	p := startInProcess(t, s.environ(), "lock", "--note", "deploy 4.2 by ana", "deploy/prod", "--", "sh", "-c", `read x < "$0"`, gate)
	s.sessionHolder(t, "deploy/prod")
	r := runInProcess(t, s.environ(), "keys", "-d")
	if r.code != exitOK || !strings.Contains(r.stdout, "  deploy 4.2 by ana\n") {
		t.Errorf("keys -d = %d %q, printed\n%s", r.code, r.stderr, r.stdout)
	}
	releaseFifo(t, gate)
	if r := p.wait(t); r.code != exitOK {
		t.Errorf("lock = %d %q", r.code, r.stderr)
	}
}
