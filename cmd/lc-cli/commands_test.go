package main

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestTryLockUnlockAndExitCodes(t *testing.T) {
	s := startServer(t, nil)
	env := append(s.environ(), "LC_SOURCE=job-17")

	if r := runInProcess(t, env, "trylock", "nightly"); r.code != exitOK || r.stdout != "" || r.stderr != "" {
		t.Fatalf("trylock of a free key = %d %q %q, want 0 and no output", r.code, r.stdout, r.stderr)
	}
	if h := s.holders(t)["nightly"]; h.Source != "job-17" {
		t.Errorf("holder source = %q, want job-17 from $LC_SOURCE", h.Source)
	}
	if r := runInProcess(t, env, "trylock", "nightly"); r.code != exitBusy || r.stderr != "" {
		t.Errorf("trylock of a held key = %d %q, want 1 and nothing on stderr", r.code, r.stderr)
	}
	if r := runInProcess(t, env, "unlock", "nightly"); r.code != exitOK || r.stderr != "" {
		t.Errorf("unlock = %d %q", r.code, r.stderr)
	}
	if _, held := s.holders(t)["nightly"]; held {
		t.Error("key still held after unlock")
	}
	if r := runInProcess(t, env, "unlock", "never-held"); r.code != exitOK {
		t.Errorf("unlock of a free key = %d %q, want 0", r.code, r.stderr)
	}
}

func TestLockWithoutCommandKeepsTheKey(t *testing.T) {
	s := startServer(t, nil)
	r := runInProcess(t, s.environ(), "--source", "flag-source", "lock", "fence")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("lock = %d %q", r.code, r.stderr)
	}
	h, held := s.holders(t)["fence"]
	if !held || h.Source != "flag-source" {
		t.Fatalf("after lock: held %v by %q, want held by flag-source", held, h.Source)
	}
}

func TestDefaultSourceNamesTheHost(t *testing.T) {
	s := startServer(t, nil)
	if r := runInProcess(t, s.environ(), "lock", "k"); r.code != exitOK {
		t.Fatalf("lock = %d %q", r.code, r.stderr)
	}
	if got := s.holders(t)["k"].Source; got != "lc-cli@testhost" {
		t.Errorf("default source = %q, want lc-cli@testhost", got)
	}
	if r := runInProcess(t, s.environ(), "--help"); !strings.Contains(r.stdout, `(default "lc-cli@testhost")`) {
		t.Errorf("--help does not show the default source:\n%s", r.stdout)
	}
}

func TestWaitReturnsHoldingNothing(t *testing.T) {
	s := startServer(t, nil)
	s.hold(t, "migration", "other")
	p := startInProcess(t, s.environ(), "wait", "migration")
	s.waitWaiters(t, "migration", 1)
	s.release(t, "migration")
	if r := p.wait(t); r.code != exitOK || r.stderr != "" {
		t.Fatalf("wait = %d %q", r.code, r.stderr)
	}
	if _, held := s.holders(t)["migration"]; held {
		t.Error("wait left the key held")
	}
}

func TestResetByKeyAndBySource(t *testing.T) {
	s := startServer(t, nil)
	s.hold(t, "a", "src-1")
	s.hold(t, "b", "src-1")
	s.hold(t, "c", "src-2")
	if r := runInProcess(t, s.environ(), "reset", "c"); r.code != exitOK || r.stdout+r.stderr != "" {
		t.Fatalf("reset c = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runInProcess(t, s.environ(), "reset", "-s", "src-1"); r.code != exitOK || r.stdout+r.stderr != "" {
		t.Fatalf("reset -s src-1 = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if hs := s.holders(t); len(hs) != 0 {
		t.Errorf("holders after resets: %v", hs)
	}
}

func TestCommandExitCodePassesThroughAndReleases(t *testing.T) {
	s := startServer(t, nil)
	for _, c := range []struct {
		script string
		want   exitCode
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"exit 1", 1},
		{"exit 2", 2},
		{"kill -TERM $$", 128 + 15},
		{"kill -KILL $$", 128 + 9},
	} {
		p := startInProcess(t, s.environ(), "lock", "job", "--", "sh", "-c", c.script)
		r := p.wait(t)
		if r.code != c.want || r.stderr != "" {
			t.Errorf("lock -- sh -c %q = %d %q, want %d and nothing on stderr", c.script, r.code, r.stderr, c.want)
		}
		if _, held := s.holders(t)["job"]; held {
			t.Errorf("after sh -c %q the key is still held", c.script)
		}
	}
}

func TestCommandSeesStdinAndWritesStdout(t *testing.T) {
	s := startServer(t, nil)
	in := startInProcessWith(t, s.environ(), strings.NewReader("piped through\n"), "lock", "k", "--", "cat")
	if r := in.wait(t); r.code != exitOK || r.stdout != "piped through\n" {
		t.Errorf("lock -- cat = %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestCommandThatCannotStart(t *testing.T) {
	s := startServer(t, nil)
	notExec := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"no-such-command-lc-cli-test"}, {notExec}} {
		r := runInProcess(t, s.environ(), append([]string{"lock", "k", "--"}, argv...)...)
		if r.code != exitCannotRun {
			t.Errorf("lock -- %s = %d, want 127", argv[0], r.code)
		}
		oneLine(t, r.stderr, "cannot run", argv[0])
		if _, held := s.holders(t)["k"]; held {
			t.Errorf("key held after %s failed to start", argv[0])
		}
	}
}

// hangingUp is a fakeServer that closes every connection at once; it
// returns an environment pointing both ports at it and the count of
// connections it accepted.
func hangingUp(t *testing.T) (env []string, accepted *atomic.Int32) {
	t.Helper()
	accepted = new(atomic.Int32)
	addr := fakeServer(t, func(c net.Conn) {
		accepted.Add(1)
		c.Close()
	})
	return []string{"LC_ADDRESS=" + addr, "LC_MANAGER_ADDRESS=" + addr}, accepted
}

func TestInvalidKeyFailsWithoutContactingAServer(t *testing.T) {
	env, accepted := hangingUp(t)
	long := strings.Repeat("k", 128)
	for _, args := range [][]string{
		{"lock", ""}, {"lock", long}, {"lock", long, "--", "true"},
		{"trylock", ""}, {"trylock", long},
		{"unlock", ""}, {"unlock", long},
		{"wait", ""}, {"wait", long},
		{"reset", ""}, {"reset", long},
		{"reset", "-s", ""}, {"reset", "-s", strings.Repeat("s", 128)},
		{"--source", strings.Repeat("s", 128), "trylock", "k"},
	} {
		r := runInProcess(t, env, args...)
		if r.code != exitFailure {
			t.Errorf("%q = %d, want 2", args, r.code)
		}
		oneLine(t, r.stderr)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("listener accepted %d connections for invalid keys, want none", n)
	}
	// A 127-byte key is valid: it is sent, and the listener's hang-up
	// makes it a failure (and lc-cli looks at the port, for its hint).
	r := runInProcess(t, env, "unlock", strings.Repeat("k", 127))
	if r.code != exitFailure {
		t.Errorf("unlock of a 127-byte key against a listener that hangs up = %d %q", r.code, r.stderr)
	}
	oneLine(t, r.stderr, strings.TrimPrefix(env[0], "LC_ADDRESS="))
	if n := accepted.Load(); n == 0 {
		t.Errorf("listener accepted no connection for the valid key")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"lock"},
		{"lock", "a", "b"},
		{"lock", "a", "--"},
		{"trylock"},
		{"trylock", "a", "b"},
		{"reset"},
		{"keys", "extra"},
		{"no-such-command"},
		{"keys", "--no-such-flag"},
		{"--connect-timeout", "0s", "keys"},
		{"--connect-timeout", "soon", "keys"},
	} {
		r := runInProcess(t, nil, args...)
		if r.code != exitFailure {
			t.Errorf("%q = %d, want 2", args, r.code)
		}
		oneLine(t, r.stderr)
	}
	r := runInProcess(t, []string{"LC_CONNECT_TIMEOUT=never"}, "keys")
	if r.code != exitFailure {
		t.Errorf("bad $LC_CONNECT_TIMEOUT = %d, want 2", r.code)
	}
	oneLine(t, r.stderr, "LC_CONNECT_TIMEOUT")
}

func TestSplitLockArgs(t *testing.T) {
	for _, c := range []struct {
		args    []string
		dash    int
		key     string
		command []string
		bad     bool
	}{
		{args: []string{"k"}, dash: -1, key: "k"},
		{args: []string{"k", "ls", "-l"}, dash: 1, key: "k", command: []string{"ls", "-l"}},
		{args: []string{"-k"}, dash: 0, key: "-k"},
		{args: []string{"-k", "--", "ls"}, dash: 0, key: "-k", command: []string{"ls"}},
		{args: []string{"k", "--"}, dash: 1, key: "k", command: []string{"--"}},
		{args: []string{"k"}, dash: 1, bad: true},
		{args: []string{"-k", "--"}, dash: 0, bad: true},
		{args: []string{"a", "b"}, dash: -1, bad: true},
		{args: []string{"a", "b", "c"}, dash: 2, bad: true},
		{args: nil, dash: -1, bad: true},
	} {
		key, command, err := splitLockArgs(c.args, c.dash)
		var ue *usageError
		if c.bad {
			if !errors.As(err, &ue) {
				t.Errorf("splitLockArgs(%q, %d) = %v, want a usage error", c.args, c.dash, err)
			}
			continue
		}
		if err != nil || key != c.key || strings.Join(command, " ") != strings.Join(c.command, " ") {
			t.Errorf("splitLockArgs(%q, %d) = %q %q %v", c.args, c.dash, key, command, err)
		}
	}
}

func TestKeyStartingWithDash(t *testing.T) {
	s := startServer(t, nil)
	if r := runInProcess(t, s.environ(), "lock", "--", "-odd", "--", "true"); r.code != exitOK {
		t.Fatalf("lock -- -odd -- true = %d %q", r.code, r.stderr)
	}
	if r := runInProcess(t, s.environ(), "trylock", "--", "-odd"); r.code != exitOK {
		t.Fatalf("trylock -- -odd = %d %q", r.code, r.stderr)
	}
	if _, held := s.holders(t)["-odd"]; !held {
		t.Error("key -odd not held after trylock")
	}
}

func TestUnreachableServer(t *testing.T) {
	addr := closedAddr(t)
	env := []string{"LC_ADDRESS=" + addr, "LC_MANAGER_ADDRESS=" + addr}
	for _, args := range [][]string{
		{"trylock", "k"}, {"lock", "k"}, {"lock", "k", "--", "true"},
		{"unlock", "k"}, {"wait", "k"}, {"keys"}, {"keys", "-d"},
		{"reset", "k"}, {"reset", "-s", "src"},
	} {
		r := runInProcess(t, env, args...)
		if r.code != exitFailure {
			t.Errorf("%q against %s = %d, want 2", args, addr, r.code)
		}
		oneLine(t, r.stderr, addr, "refused")
	}
}

func TestFlagWinsOverEnvironment(t *testing.T) {
	s := startServer(t, nil)
	bad := closedAddr(t)
	r := runInProcess(t, s.environ(), "--address", bad, "trylock", "k")
	if r.code != exitFailure {
		t.Fatalf("trylock with --address %s = %d", bad, r.code)
	}
	oneLine(t, r.stderr, bad)
	r = runInProcess(t, s.environ(), "--manager-address", bad, "keys")
	if r.code != exitFailure {
		t.Fatalf("keys with --manager-address %s = %d", bad, r.code)
	}
	oneLine(t, r.stderr, bad)
}

// fakeServer serves every connection to handle, on 127.0.0.1, until the
// test ends, and returns its address.
func fakeServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln := listen(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { handle(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// answering is a fakeServer handler that answers answer once the request's
// first bytes have arrived, then waits for the client to close: a server
// that refuses everything ('-') or speaks nonsense.
func answering(answer byte) func(net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
		var b [256]byte
		if _, err := c.Read(b[:]); err == nil {
			c.Write([]byte{answer})
			c.(*net.TCPConn).CloseWrite()
			io.Copy(io.Discard, c)
		}
	}
}

func TestRefusedRequestIsFailureNeverBusy(t *testing.T) {
	addr := fakeServer(t, answering('-'))
	env := []string{"LC_ADDRESS=" + addr, "LC_MANAGER_ADDRESS=" + addr}
	for _, args := range [][]string{
		{"trylock", "k"}, {"lock", "k"}, {"lock", "k", "--", "true"}, {"unlock", "k"},
		{"wait", "k"}, {"keys"}, {"keys", "-d"}, {"reset", "k"}, {"reset", "-s", "src"},
	} {
		r := runInProcess(t, env, args...)
		if r.code != exitFailure {
			t.Errorf("%q answered '-' = %d, want 2", args, r.code)
		}
		hint := "AUTH_V1_NETWORKS"
		switch {
		case args[0] == "keys" || args[0] == "reset":
			hint = "--token"
		case len(args) > 2 || args[0] == "wait": // a session: its own explanation
			hint = "session protocol"
		}
		if hint == "AUTH_V1_NETWORKS" {
			oneLine(t, r.stderr, addr, "refused the request", hint, "removed from its cluster")
		} else {
			oneLine(t, r.stderr, addr, "refused the request", hint)
		}
	}
	nonsense := fakeServer(t, answering('#'))
	r := runInProcess(t, []string{"LC_ADDRESS=" + nonsense}, "lock", "k")
	if r.code != exitFailure {
		t.Errorf("lock answered '#' = %d, want 2", r.code)
	}
	oneLine(t, r.stderr, nonsense, "unexpected answer")
}

func TestVersionAndCompletion(t *testing.T) {
	r := runInProcess(t, nil, "version")
	if r.code != exitOK || r.stdout != "lc-cli dev (commit none)\n" {
		t.Errorf("version = %d %q", r.code, r.stdout)
	}
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		r := runInProcess(t, nil, "completion", shell)
		if r.code != exitOK || !strings.Contains(r.stdout, "lc-cli") {
			t.Errorf("completion %s = %d, %d bytes", shell, r.code, len(r.stdout))
		}
	}
}

func TestCompletionOffersHeldKeysAndSources(t *testing.T) {
	s := startServer(t, nil)
	s.hold(t, "orders/batch-7", "worker-3")
	r := runInProcess(t, s.environ(), "__complete", "reset", "")
	if !strings.Contains(r.stdout, "orders/batch-7\n") {
		t.Errorf("completion of reset offers %q, want the held key", r.stdout)
	}
	r = runInProcess(t, s.environ(), "__complete", "unlock", "")
	if !strings.Contains(r.stdout, "orders/batch-7\n") {
		t.Errorf("completion of unlock offers %q, want the held key", r.stdout)
	}
	r = runInProcess(t, s.environ(), "__complete", "reset", "-s", "")
	if !strings.Contains(r.stdout, "worker-3\n") {
		t.Errorf("completion of reset -s offers %q, want the holder's source", r.stdout)
	}
}

// Completion offers the new flags, their values, and none of the old
// names of the TLS flags.
func TestCompletionOffersTheFlags(t *testing.T) {
	for _, c := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"lock", "--"}, []string{"--nonblock", "--wait", "--tls-cert", "--tls-key", "--tls-ca"}, []string{"--key\t", "--cert\t", "--ca\t"}},
		{[]string{"lock", "-"}, []string{"-n\t", "-w\t"}, nil},
		{[]string{"keys", "--"}, []string{"--output", "--detail"}, nil},
		{[]string{"sessions", "--"}, []string{"--output"}, nil},
		{[]string{"cluster", "list", "--"}, []string{"--output"}, nil},
		{[]string{"version", "--"}, []string{"--output"}, nil},
		{[]string{"watch", "--"}, []string{"--output", "--ttl"}, nil},
		{[]string{"keys", "-o", ""}, []string{"text\n", "json\n"}, nil},
		{[]string{""}, []string{"watch\t"}, nil},
	} {
		r := runInProcess(t, nil, append([]string{"__complete"}, c.args...)...)
		for _, w := range c.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("completion of %q offers no %q:\n%s", c.args, w, r.stdout)
			}
		}
		for _, n := range c.not {
			if strings.Contains(r.stdout, n) {
				t.Errorf("completion of %q offers %q:\n%s", c.args, n, r.stdout)
			}
		}
	}
}
