//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run the built lc-cli as a process against a live server;
// the signal tests run it so too, next to the in-process runs.

func TestBinaryExitCodes(t *testing.T) {
	s := startServer(t, nil)
	env := append(s.environ(), "LC_SOURCE=bin-test")
	for _, c := range []struct {
		args []string
		want exitCode
		line string // what the one line on stderr must name; empty: silent
	}{
		{[]string{"trylock", "held"}, 0, ""},
		{[]string{"trylock", "held"}, 1, ""},
		{[]string{"trylock", ""}, 2, "key is empty"},
		{[]string{"lock", strings.Repeat("x", 128), "--", "true"}, 2, "too long"},
		{[]string{"lock", "job", "--", "sh", "-c", "exit 5"}, 5, ""},
		{[]string{"lock", "job", "--", "sh", "-c", "kill -TERM $$"}, 143, ""},
		{[]string{"lock", "job", "--", "no-such-command-lc-cli-test"}, 127, "cannot run"},
		{[]string{"unlock", "held"}, 0, ""},
		{[]string{"--address", "127.0.0.1:1", "trylock", "k"}, 2, "127.0.0.1:1"},
		{[]string{"--manager-address", "127.0.0.1:1", "keys"}, 2, "127.0.0.1:1"},
		{[]string{"trylock", "--hex", "00ff"}, 0, ""},
		{[]string{"trylock", "--quoted", `"\x00\xff"`}, 1, ""},
		{[]string{"reset", "--quoted", `"\x00\xff"`}, 0, ""},
		{[]string{"reset", "--hex", "zz"}, 2, "--hex"},
		{[]string{"unlock", "--quoted", `a\x00b`}, 2, "--quoted"},
	} {
		r := runBinary(t, env, c.args...)
		if r.code != c.want {
			t.Errorf("lc-cli %q = %d, want %d (stderr %q)", c.args, r.code, c.want, r.stderr)
		}
		if c.line == "" && r.stderr != "" {
			t.Errorf("lc-cli %q wrote %q to stderr", c.args, r.stderr)
		}
		if c.line != "" {
			oneLine(t, r.stderr, c.line)
		}
		if _, held := s.holders(t)["job"]; held {
			t.Errorf("lc-cli %q left the key held", c.args)
		}
	}
	if hs := s.holders(t); len(hs) != 0 {
		t.Errorf("keys left held: %v", hs)
	}
	unreachable := closedAddr(t)
	r := runBinary(t, []string{"LC_ADDRESS=" + unreachable}, "lock", "k", "--", "true")
	if r.code != exitFailure {
		t.Errorf("lock against %s = %d, want 2", unreachable, r.code)
	}
	oneLine(t, r.stderr, unreachable, "refused")
}

func TestBinaryVersionIsStamped(t *testing.T) {
	r := runBinary(t, nil, "version")
	if want := "lc-cli " + testVersion + " (commit " + testCommit + ")\n"; r.code != exitOK || r.stdout != want {
		t.Errorf("version = %d %q, want %q", r.code, r.stdout, want)
	}
}

func TestBinaryKeysDetail(t *testing.T) {
	s := layoutTable(t)
	r := runBinary(t, append(s.environ(), "TZ=UTC"), "keys", "-d")
	want := "" +
		"KEY           SOURCE           REMOTE                 ACQUIRED                 HELD  WAITERS                TOKEN  SESSION  MODE       HOLDERS  LEASE  NOTE\n" +
		"a             lc-cli@build-07  192.168.100.201:40022  2026-08-27 10:00:21      3.2s        2  1787824751000000002        -  exclusive        1      -  -\n" +
		"\"bin\\x00key\"  -                -                      2026-08-26 07:56:11  1d02h04m        0  1787824751000000003        -  exclusive        1      -  -\n" +
		"deploy/prod   ci-job-4411      10.0.0.4:51314         2026-08-27 09:59:11     1m13s        0  1787824751000000001        -  exclusive        1      -  -\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("keys -d = %d, stderr %q, printed\n%s\nwant\n%s", r.code, r.stderr, r.stdout, want)
	}
}

// TestBinaryKilledLockFreesTheKeyAfterTheTTL kills lc-cli with SIGKILL
// while its command runs: the key stays held until the session's TTL has
// passed on the server's clock, and not a moment longer.
func TestBinaryKilledLockFreesTheKeyAfterTheTTL(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	s := startServer(t, clock.Now)
	pidFile := filepath.Join(t.TempDir(), "pid")
	b := startBinary(t, s.environ(), "lock", "--ttl", "2s", "k", "--",
		"sh", "-c", `echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 1000 >/dev/null 2>&1 </dev/null`, pidFile)
	s.sessionHolder(t, "k")
	var pid int
	eventually(t, "the command to start", func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) }) // lc-cli cannot stop it once killed
	b.signal(syscall.SIGKILL)
	b.wait(t)

	start := clock.Now()
	clock.Set(start.Add(2*time.Second - time.Millisecond))
	s.table.Advance()
	if _, held := s.holders(t)["k"]; !held {
		t.Fatal("the key was freed before the session's TTL passed")
	}
	clock.Set(start.Add(2*time.Second + time.Millisecond))
	s.table.Advance()
	if h, held := s.holders(t)["k"]; held {
		t.Fatalf("the key is still held after the TTL: %+v", h)
	}
}
