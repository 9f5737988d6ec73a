package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/manager"
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
		Manager:  &manager.Client{Addr: s.managerAddr},
		Detail:   true,
		Location: time.FixedZone("CEST", 2*60*60),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"KEY           SOURCE           REMOTE                 ACQUIRED                 HELD  WAITERS\n" +
		"a             lc-cli@build-07  192.168.100.201:40022  2026-08-27 12:00:21      3.2s        2\n" +
		"\"bin\\x00key\"  -                -                      2026-08-26 09:56:11  1d02h04m        0\n" +
		"deploy/prod   ci-job-4411      10.0.0.4:51314         2026-08-27 11:59:11     1m13s        0\n"
	if out.String() != want {
		t.Errorf("keys -d printed\n%s\nwant\n%s", out.String(), want)
	}
}

func TestKeysDetailEmptyTableIsHeaderOnly(t *testing.T) {
	s := startServer(t, nil)
	r := runInProcess(t, s.environ(), "keys", "-d")
	if r.code != exitOK || r.stdout != "KEY  SOURCE  REMOTE  ACQUIRED  HELD  WAITERS\n" || r.stderr != "" {
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
