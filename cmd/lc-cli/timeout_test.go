package main

import (
	"io"
	"net"
	"testing"
)

// silent is a fakeServer handler that takes the request and never answers:
// a server that accepts connections and then hangs.
func silent(c net.Conn) {
	defer c.Close()
	io.Copy(io.Discard, c)
}

// grantsOnly is a fakeServer handler that grants every lock at once and
// never answers anything else.
func grantsOnly(c net.Conn) {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err == nil && b[0] == 1 {
		answering('+')(c)
		return
	}
	silent(c)
}

func TestTimeoutEndsEveryRequestThatDoesNotWait(t *testing.T) {
	addr := fakeServer(t, silent)
	env := []string{"LC_ADDRESS=" + addr, "LC_MANAGER_ADDRESS=" + addr, "LC_TIMEOUT=100ms"}
	for _, args := range [][]string{
		{"trylock", "k"}, {"unlock", "k"}, {"keys"}, {"keys", "-d"},
		{"reset", "k"}, {"reset", "-s", "src"},
	} {
		r := runInProcess(t, env, args...)
		if r.code != exitFailure {
			t.Errorf("%q against a silent server = %d, want 2", args, r.code)
		}
		oneLine(t, r.stderr, addr, "within 100ms")
	}
	r := runInProcess(t, []string{"LC_ADDRESS=" + addr, "LC_TIMEOUT=1h"}, "--timeout", "100ms", "trylock", "k")
	if r.code != exitFailure {
		t.Errorf("trylock with --timeout 100ms against a silent server = %d, want 2", r.code)
	}
	oneLine(t, r.stderr, addr, "no answer within 100ms")
}

func TestTimeoutBoundsTheReleaseOfWaitAndLock(t *testing.T) {
	addr := fakeServer(t, grantsOnly)
	env := []string{"LC_ADDRESS=" + addr, "LC_TIMEOUT=100ms"}
	for _, args := range [][]string{{"wait", "k"}, {"lock", "k", "--", "true"}} {
		r := runInProcess(t, env, args...)
		if r.code != exitFailure {
			t.Errorf("%q whose unlock is never answered = %d, want 2", args, r.code)
		}
		oneLine(t, r.stderr, addr, "no answer within 100ms")
	}
}

func TestTimeoutLeavesTheWaitOfLockAlone(t *testing.T) {
	s := startServer(t, nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			key := "queued/" + m.name
			s.hold(t, key, "other")
			// A bound on the lock would end it before the grant, which
			// comes only once the request is queued.
			p := m.start(t, append(s.environ(), "LC_TIMEOUT=1ns", "LC_SOURCE=waiter"), "lock", key)
			s.waitWaiters(t, key, 1)
			s.release(t, key)
			if r := p.wait(t); r.code != exitOK {
				t.Fatalf("lock with a 1ns timeout = %d %q, want the grant", r.code, r.stderr)
			}
			if h := s.holders(t)[key]; h.Source != "waiter" {
				t.Errorf("holder of %q = %q, want waiter", key, h.Source)
			}
		})
	}
}

func TestTimeoutMustBePositive(t *testing.T) {
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"--timeout", "0s", "keys"}},
		{nil, []string{"--timeout", "-1s", "trylock", "k"}},
		{nil, []string{"--timeout", "soon", "keys"}},
		{[]string{"LC_TIMEOUT=never"}, []string{"keys"}},
		{[]string{"LC_TIMEOUT=10"}, []string{"unlock", "k"}},
	} {
		r := runInProcess(t, c.env, c.args...)
		if r.code != exitFailure {
			t.Errorf("%q %q = %d, want 2", c.env, c.args, r.code)
		}
		oneLine(t, r.stderr, "timeout")
	}
}
