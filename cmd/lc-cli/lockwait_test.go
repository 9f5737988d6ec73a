package main

import (
	"testing"
)

// lock -n and lock -w on a held key exit 1 and print nothing, with a
// command or without; nothing is left queued for the key, so that the
// holder's release leaves it free.
func TestLockNonblockAndWaitOnAHeldKey(t *testing.T) {
	s := startServer(t, nil)
	s.hold(t, "held", "other")
	for _, args := range [][]string{
		{"lock", "-n", "held", "--", "sh", "-c", "echo ran"},
		{"lock", "-n", "held"},
		{"lock", "--nonblock", "held"},
		{"lock", "-w", "0", "held", "--", "sh", "-c", "echo ran"},
		{"lock", "-w", "1s", "held", "--", "sh", "-c", "echo ran"},
		{"lock", "--wait", "200ms", "held", "--", "sh", "-c", "echo ran"},
		{"lock", "-w", "200ms", "held"},
	} {
		r := runInProcess(t, s.environ(), args...)
		if r.code != exitBusy || r.stdout != "" || r.stderr != "" {
			t.Errorf("%q on a held key = %d, stdout %q, stderr %q; want 1 and nothing printed", args, r.code, r.stdout, r.stderr)
		}
		s.waitWaiters(t, "held", 0)
	}
	if h := s.holders(t)["held"]; h.Source != "other" || h.Waiters != 0 {
		t.Fatalf("held: %+v, want other's with nobody queued", h)
	}
	s.release(t, "held")
	if _, held := s.holders(t)["held"]; held {
		t.Fatal("a withdrawn request was handed the key")
	}
}

// A session's wait that ran out (lock -w with a command) is withdrawn by
// the server before it answers: nothing is queued once lc-cli has exited.
func TestLockWaitWithACommandLeavesNothingQueued(t *testing.T) {
	s := startServer(t, nil)
	s.hold(t, "held", "other")
	r := runInProcess(t, s.environ(), "lock", "-w", "300ms", "held", "--", "true")
	if r.code != exitBusy {
		t.Fatalf("lock -w on a held key = %d %q", r.code, r.stderr)
	}
	if h := s.holders(t)["held"]; h.Waiters != 0 {
		t.Fatalf("after lock -w ran out, %d requests are queued", h.Waiters)
	}
}

// lock -n and lock -w take a free key: with a command they run it and
// release the key, without one they keep it.
func TestLockNonblockAndWaitOnAFreeKey(t *testing.T) {
	s := startServer(t, nil)
	for _, flags := range [][]string{{"-n"}, {"-w", "1s"}} {
		r := runInProcess(t, s.environ(), append(append([]string{"lock"}, flags...), "free", "--", "sh", "-c", "echo ran")...)
		if r.code != exitOK || r.stdout != "ran\n" {
			t.Errorf("lock %q on a free key = %d, stdout %q, stderr %q", flags, r.code, r.stdout, r.stderr)
		}
		if _, held := s.holders(t)["free"]; held {
			t.Errorf("lock %q --: the key is held after the command", flags)
		}
		r = runInProcess(t, s.environ(), append(append([]string{"lock"}, flags...), "kept")...)
		if r.code != exitOK {
			t.Errorf("lock %q without a command = %d %q", flags, r.code, r.stderr)
		}
		if _, held := s.holders(t)["kept"]; !held {
			t.Errorf("lock %q without a command: the key is not held", flags)
		}
		s.release(t, "kept")
	}
}

func TestLockWaitUsage(t *testing.T) {
	for _, args := range [][]string{
		{"lock", "-n", "-w", "1s", "k"},
		{"lock", "-w", "-1s", "k", "--", "true"},
		{"lock", "-w", "soon", "k"},
	} {
		r := runInProcess(t, nil, args...)
		if r.code != exitFailure {
			t.Errorf("%q = %d, want 2", args, r.code)
		}
		oneLine(t, r.stderr)
	}
}
