package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
	"github.com/prometheus/client_golang/prometheus"
)

// epoch is a fixed grant time, so that generated logs are byte-for-byte
// the same on every run.
var epoch = time.Date(2024, 3, 1, 12, 0, 0, 123456789, time.UTC)

// grant and release build changes for tests.
func grant(key, source, remote string, at time.Time) mutex.Change {
	return mutex.Change{Op: mutex.OpGrant, Grant: mutex.Grant{Key: key, Source: source, RemoteAddr: remote, Acquired: at}}
}

func release(key string) mutex.Change {
	return mutex.Change{Op: mutex.OpRelease, Grant: mutex.Grant{Key: key}}
}

// history is a sequence of changes with keys that are not valid UTF-8,
// hold NUL and 0xFF, and a source of every length class; every record
// offset is known.
func history() []mutex.Change {
	return []mutex.Change{
		grant("orders/batch-7", "10.0.0.4", "10.0.0.4:51314", epoch),
		grant("\xff\xfe\x00binary", "src\x00\xff", "10.0.0.9:44120", epoch.Add(time.Second)),
		grant("released-soon", "", "[::1]:40000", epoch.Add(2*time.Second)),
		release("released-soon"),
		grant("\x80", string(bytes.Repeat([]byte{0xff}, mutex.MaxSourceLen)), "127.0.0.1:1", epoch.Add(-time.Hour)),
		grant(string(bytes.Repeat([]byte{0}, mutex.MaxKeyLen)), "s", "127.0.0.1:2", time.Unix(0, 0)),
		grant("orders/batch-7", "10.0.0.5", "10.0.0.5:1", epoch.Add(3*time.Second)),
		grant("last", "pod-1", "10.1.1.1:9", epoch.Add(4*time.Second)),
	}
}

// encodeLog returns the records of changes and the offset of each.
func encodeLog(changes []mutex.Change) ([]byte, []int) {
	var b []byte
	offs := make([]int, len(changes))
	for i, c := range changes {
		offs[i] = len(b)
		b = appendRecord(b, c)
	}
	return b, offs
}

// model replays changes the simple way: the expected held grants.
func model(changes []mutex.Change) []mutex.Grant {
	held := make(map[string]mutex.Grant)
	for _, c := range changes {
		if c.Op == mutex.OpGrant {
			held[c.Grant.Key] = c.Grant
		} else {
			delete(held, c.Grant.Key)
		}
	}
	out := make([]mutex.Grant, 0, len(held))
	for _, g := range held {
		out = append(out, g)
	}
	return out
}

// sameGrants fails t unless got and want hold the same keys with the same
// source, remote address and acquired time (to the nanosecond).
func sameGrants(t *testing.T, got, want []mutex.Grant) {
	t.Helper()
	norm := func(gs []mutex.Grant) []string {
		out := make([]string, len(gs))
		for i, g := range gs {
			out[i] = fmt.Sprintf("%q src=%q remote=%q at=%d", g.Key, g.Source, g.RemoteAddr, g.Acquired.UnixNano())
		}
		sort.Strings(out)
		return out
	}
	g, w := norm(got), norm(want)
	if len(g) != len(w) {
		t.Fatalf("held %d keys, want %d:\n got %q\nwant %q", len(g), len(w), g, w)
	}
	for i := range g {
		if g[i] != w[i] {
			t.Fatalf("held grant %d:\n got %s\nwant %s", i, g[i], w[i])
		}
	}
}

// testLogger routes a Log's messages to t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// tempLogPath returns the path of a log in a new temp directory.
func tempLogPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "locks.wal")
}

// openLog opens the log at path with cfg's other fields and closes it at
// the end of the test.
func openLog(t *testing.T, path string, cfg Config) (*Log, []mutex.Grant) {
	t.Helper()
	cfg.Path = path
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	l, grants, err := Open(cfg)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	return l, grants
}

// reopen closes l and opens path again, returning the grants it restores.
func reopen(t *testing.T, l *Log, path string) []mutex.Grant {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	l2, grants := openLog(t, path, Config{})
	if err := l2.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return grants
}

// appendAll appends changes and waits for each; it returns their errors.
func appendAll(l *Log, changes ...mutex.Change) []error {
	ps := make([]mutex.Pending, len(changes))
	for i, c := range changes {
		ps[i] = l.Append(c)
	}
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p.Wait()
	}
	return errs
}

// mustAppend appends changes and fails t unless every one is durable.
func mustAppend(t *testing.T, l *Log, changes ...mutex.Change) {
	t.Helper()
	for i, err := range appendAll(l, changes...) {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
}

// replayFile returns the grants the log at path replays to, without
// opening it as a Log.
func replayFile(t *testing.T, path string) []mutex.Grant {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	s := newState()
	if _, err := scan(f, fi.Size(), s.apply); err != nil {
		t.Fatalf("replay %s: %v", path, err)
	}
	return s.grants()
}

// counterValue returns the value of the counter name gathered from reg,
// and whether reg has it.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// Metric names of the store.
const (
	metricWriteErrors = "locking_center_store_write_errors_total"
	metricCompactions = "locking_center_store_compactions_total"
)

// errInjected is the failure a faults plan injects.
var errInjected = errors.New("injected I/O error")

// faults makes the files a Log opens fail on demand. Each count is the
// number of next calls of that operation that fail; zero lets calls
// through. Its methods are safe for concurrent use.
type faults struct {
	mu        sync.Mutex
	writes    int  // WriteAt
	syncs     int  // Sync
	truncates int  // Truncate
	opens     int  // OpenFile
	partial   bool // a failing WriteAt writes the first half of its bytes
	// suffix, when set, limits the failures to files whose name ends so.
	suffix string
	// gate, when set, holds every Sync: Sync sends on entered, then
	// waits for a receive from proceed.
	entered, proceed chan struct{}
}

// set changes the plan under its lock.
func (fl *faults) set(f func(*faults)) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	f(fl)
}

// take reports whether the next call counted by n fails, and counts it.
func (fl *faults) take(n *int) bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if *n > 0 {
		*n--
		return true
	}
	return false
}

// openFile is the Config.OpenFile of the plan.
func (fl *faults) openFile(name string, flag int, perm os.FileMode) (File, error) {
	if fl.take(&fl.opens) {
		return nil, &os.PathError{Op: "open", Path: name, Err: errInjected}
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, fl: fl, name: name}, nil
}

type faultFile struct {
	File
	fl   *faults
	name string
}

// fail reports whether this call, counted by n, fails.
func (f *faultFile) fail(n *int) bool {
	f.fl.mu.Lock()
	suffix := f.fl.suffix
	f.fl.mu.Unlock()
	return strings.HasSuffix(f.name, suffix) && f.fl.take(n)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fail(&f.fl.writes) {
		f.fl.mu.Lock()
		partial := f.fl.partial
		f.fl.mu.Unlock()
		n := 0
		if partial {
			n, _ = f.File.WriteAt(p[:len(p)/2], off)
		}
		return n, errInjected
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	f.fl.mu.Lock()
	entered, proceed := f.fl.entered, f.fl.proceed
	f.fl.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
		<-proceed
	}
	if f.fail(&f.fl.syncs) {
		return errInjected
	}
	return f.File.Sync()
}

func (f *faultFile) Truncate(size int64) error {
	if f.fail(&f.fl.truncates) {
		return errInjected
	}
	return f.File.Truncate(size)
}
