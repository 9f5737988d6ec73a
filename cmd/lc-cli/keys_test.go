package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// fakeClock is a table clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// layoutTable fills a server on a fake clock with three holders: one with
// two waiters, one restored from a journal with no source or remote
// address and a binary key, and one held for 73.204 s. It returns the
// server; the clock reads T0+73.204s.
func layoutTable(t *testing.T) *testServer {
	t.Helper()
	t0 := time.Date(2026, 8, 27, 9, 59, 11, 0, time.UTC)
	clock := &fakeClock{now: t0}
	s := startServer(t, clock.Now)
	grant := func(key, source, remote string) {
		t.Helper()
		if _, _, err := s.table.TryLock(mutex.Claim{Key: key, Source: source, RemoteAddr: remote}); err != nil {
			t.Fatalf("grant %q: %v", key, err)
		}
	}
	grant("deploy/prod", "ci-job-4411", "10.0.0.4:51314")
	clock.Set(t0.Add(70 * time.Second))
	grant("a", "lc-cli@build-07", "192.168.100.201:40022")
	for _, w := range []mutex.Claim{{Key: "a", Source: "w1", RemoteAddr: "10.0.0.5:1"}, {Key: "a", Source: "w2", RemoteAddr: "10.0.0.6:1"}} {
		s.table.Apply(mutex.Command{Op: mutex.OpAcquire, Key: w.Key, Source: w.Source, RemoteAddr: w.RemoteAddr})
	}
	clock.Set(t0.Add(-26*time.Hour - 3*time.Minute))
	grant("bin\x00key", "", "")
	clock.Set(t0.Add(73204 * time.Millisecond))
	return s
}

func TestKeysDetailLayout(t *testing.T) {
	s := layoutTable(t)
	var out strings.Builder
	err := runKeys(context.Background(), &keysOptions{
		Stdout:   &out,
		Manager:  &managers{addrs: []string{s.managerAddr}},
		Detail:   true,
		Location: time.FixedZone("CEST", 2*60*60),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Tokens start at the node clock's Unix nanoseconds (t0) and count up.
	want := "" +
		"KEY           SOURCE           REMOTE                 ACQUIRED                 HELD  WAITERS                TOKEN  SESSION  MODE       HOLDERS  LEASE  NOTE\n" +
		"a             lc-cli@build-07  192.168.100.201:40022  2026-08-27 12:00:21      3.2s        2  1787824751000000002        -  exclusive        1      -  -\n" +
		"\"bin\\x00key\"  -                -                      2026-08-26 09:56:11  1d02h04m        0  1787824751000000003        -  exclusive        1      -  -\n" +
		"deploy/prod   ci-job-4411      10.0.0.4:51314         2026-08-27 11:59:11     1m13s        0  1787824751000000001        -  exclusive        1      -  -\n"
	if out.String() != want {
		t.Errorf("keys -d printed\n%s\nwant\n%s", out.String(), want)
	}
}

func TestKeysDetailEmptyTableIsHeaderOnly(t *testing.T) {
	s := startServer(t, nil)
	r := runInProcess(t, s.environ(), "keys", "-d")
	if r.code != exitOK || r.stdout != "KEY  SOURCE  REMOTE  ACQUIRED  HELD  WAITERS  TOKEN  SESSION  MODE  HOLDERS  LEASE  NOTE\n" || r.stderr != "" {
		t.Errorf("keys -d on an empty table = %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestKeysListsOneKeyPerLine(t *testing.T) {
	s := layoutTable(t)
	r := runInProcess(t, s.environ(), "keys")
	want := "a\n\"bin\\x00key\"\ndeploy/prod\n"
	if r.code != exitOK || r.stdout != want || r.stderr != "" {
		t.Errorf("keys = %d %q %q, want 0 %q", r.code, r.stdout, r.stderr, want)
	}
	empty := startServer(t, nil)
	if r := runInProcess(t, empty.environ(), "keys"); r.code != exitOK || r.stdout != "" {
		t.Errorf("keys on an empty table = %d %q", r.code, r.stdout)
	}
}

func TestFormatHeld(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0.0s"},
		{0, "0.0s"},
		{99 * time.Millisecond, "0.0s"},
		{4500 * time.Millisecond, "4.5s"},
		{59960 * time.Millisecond, "59.9s"},
		{time.Minute, "1m00s"},
		{73204 * time.Millisecond, "1m13s"},
		{time.Hour - time.Millisecond, "59m59s"},
		{3*time.Hour + 4*time.Minute + 5*time.Second, "3h04m05s"},
		{49*time.Hour + 30*time.Second, "2d01h00m"},
		{400 * 24 * time.Hour, "400d00h00m"},
	} {
		if got := formatHeld(c.d); got != c.want {
			t.Errorf("formatHeld(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

type nopRoute struct{}

func (nopRoute) Deliver(mutex.Output) {}
func (nopRoute) Flush()               {}

// keys -d shows a session's holders with their session, mode, count and
// lease; sessions lists the sessions.
func TestSessionsAndSessionHolders(t *testing.T) {
	t0 := time.Date(2026, 8, 27, 9, 59, 11, 0, time.UTC)
	clock := &fakeClock{now: t0}
	s := startServer(t, clock.Now)
	l, _, _ := s.table.OpenSession("svc-1", 10*time.Second, [mutex.SecretHashLen]byte{}, "10.0.0.9:4000", nopRoute{})
	for i, c := range []mutex.Command{
		{Key: "r", Mode: mutex.Shared, Owner: "a"},
		{Key: "r", Mode: mutex.Shared, Owner: "b"},
		{Key: "sem", Limit: 3, Lease: 90 * time.Second, Note: "nightly ledger, run 7"},
		{Key: "sem", Limit: 3, Lease: 90 * time.Second, Reentrant: true},
	} {
		c.Op, c.Session, c.Request, c.Source, c.RemoteAddr = mutex.OpAcquire, l.ID(), uint64(i+1), "svc-1", "10.0.0.9:4000"
		if res, _, _ := s.table.ApplySession(c); res.Status != mutex.StatusGranted {
			t.Fatalf("acquire %d: %v", i, res.Status)
		}
	}
	clock.Set(t0.Add(2 * time.Second))
	r := runInProcess(t, append(s.environ(), "TZ=UTC"), "keys", "-d")
	want := "" +
		"KEY  SOURCE  REMOTE         ACQUIRED             HELD  WAITERS                TOKEN  SESSION  MODE            HOLDERS  LEASE  NOTE\n" +
		"r    svc-1   10.0.0.9:4000  2026-08-27 09:59:11  2.0s        0  1787824751000000001        1  shared                2      -  -\n" +
		"r    svc-1   10.0.0.9:4000  2026-08-27 09:59:11  2.0s        0  1787824751000000002        1  shared                2      -  -\n" +
		"sem  svc-1   10.0.0.9:4000  2026-08-27 09:59:11  2.0s        0  1787824751000000003        1  semaphore/3 x2        1  1m28s  nightly ledger, run 7\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("keys -d = %d %q, printed\n%s\nwant\n%s", r.code, r.stderr, r.stdout, want)
	}
	r = runInProcess(t, s.environ(), "sessions")
	want = "" +
		"ID  NAME   REMOTE           TTL  IDLE  HELD  PARKED\n" +
		" 1  svc-1  10.0.0.9:4000  10.0s  2.0s     3       0\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("sessions = %d %q, printed\n%s\nwant\n%s", r.code, r.stderr, r.stdout, want)
	}
}
