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

// acquire and release build v1 commands for tests: on a free key an
// acquire is a grant.
func acquire(key, source, remote string, at time.Time) mutex.Command {
	return mutex.Command{Op: mutex.OpAcquire, At: at, Key: key, Source: source, RemoteAddr: remote, ConnBound: true}
}

func release(key string, at time.Time) mutex.Command {
	return mutex.Command{Op: mutex.OpRelease, At: at, Key: key}
}

// secret is a resume secret's hash for the sessions of tests.
var secret = [mutex.SecretHashLen]byte{1, 2, 3, 0xff, 31: 9}

// history is a sequence of commands with keys that are not valid UTF-8,
// hold NUL and 0xFF, a source of every length class, and a session with a
// lease, a lock-delay and a shared lock; every record offset is known.
func history() []mutex.Command {
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	return []mutex.Command{
		acquire("orders/batch-7", "10.0.0.4", "10.0.0.4:51314", at(0)),
		acquire("\xff\xfe\x00binary", "src\x00\xff", "10.0.0.9:44120", at(time.Second)),
		acquire("released-soon", "", "[::1]:40000", at(2*time.Second)),
		release("released-soon", at(2500*time.Millisecond)),
		acquire("\x80", string(bytes.Repeat([]byte{0xff}, mutex.MaxSourceLen)), "127.0.0.1:1", epoch.Add(-time.Hour)),
		acquire(string(bytes.Repeat([]byte{0}, mutex.MaxKeyLen)), "s", "127.0.0.1:2", time.Unix(0, 1)),
		{Op: mutex.OpOpenSession, At: at(3 * time.Second), Source: "svc", TTL: 10 * time.Second, SecretHash: secret},
		{Op: mutex.OpAcquire, At: at(3 * time.Second), Session: 1, Request: 1, Key: "leased", RemoteAddr: "10.0.0.6:7",
			Lease: 30 * time.Second, Delay: 5 * time.Second, Owner: "job"},
		{Op: mutex.OpAcquire, At: at(3 * time.Second), Session: 1, Request: 2, Key: "shared", Mode: mutex.Shared},
		release("orders/batch-7", at(3*time.Second)),
		acquire("orders/batch-7", "10.0.0.5", "10.0.0.5:1", at(3*time.Second)),
		acquire("last", "pod-1", "10.1.1.1:9", at(4*time.Second)),
	}
}

// encodeLog returns the records of commands and the offset of each.
func encodeLog(cmds []mutex.Command) ([]byte, []int) {
	var b []byte
	offs := make([]int, len(cmds))
	for i := range cmds {
		offs[i] = len(b)
		b = appendRecord(b, &cmds[i])
	}
	return b, offs
}

// model applies commands to a new table, as replay should.
func model(cmds []mutex.Command) *mutex.Table {
	t := mutex.NewTable()
	for i := range cmds {
		c := cmds[i]
		t.Apply(&c)
		t.TakeEvents()
	}
	return t
}

// exportOf returns the records of t's state.
func exportOf(t *mutex.Table) []mutex.Record {
	var out []mutex.Record
	t.Export(func(r *mutex.Record) { out = append(out, *r) })
	return out
}

// sameTable fails t unless got and want hold the same state: holders with
// their tokens, sources, addresses and times to the nanosecond, waiters and
// sessions; got's counters may be ahead of want's.
func sameTable(t *testing.T, got, want *mutex.Table) {
	t.Helper()
	g, w := exportOf(got), exportOf(want)
	// The counters may have gone further (commands that changed nothing
	// kept), never less far.
	if g[0].LastToken < w[0].LastToken || g[0].LastTicket < w[0].LastTicket || g[0].LastSession < w[0].LastSession {
		t.Fatalf("counters %+v behind %+v", g[0], w[0])
	}
	g, w = g[1:], w[1:]
	norm := func(rs []mutex.Record) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = fmt.Sprintf("%d %q tok=%d sess=%d src=%q addr=%q at=%d lease=%d/%d n=%d/%d/%d",
				r.Kind, r.Key, r.Token, r.Session, r.Source, r.RemoteAddr, r.Acquired.UnixNano(),
				r.LeaseFor, r.LeaseAt.UnixNano(), r.LastToken, r.LastTicket, r.LastSession)
		}
		return out
	}
	if len(g) != len(w) {
		t.Fatalf("table has %d records, want %d:\n got %q\nwant %q", len(g), len(w), norm(g), norm(w))
	}
	for i := range g {
		if g[i] != w[i] {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, g[i], w[i])
		}
	}
}

// heldKeys returns the keys of t's holders and their sources, sorted.
func heldKeys(t *mutex.Table) []string {
	var out []string
	t.Export(func(r *mutex.Record) {
		if r.Kind == mutex.RecordHolder {
			out = append(out, fmt.Sprintf("%q=%q", r.Key, r.Source))
		}
	})
	sort.Strings(out)
	return out
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
func openLog(t *testing.T, path string, cfg Config) (*Log, *mutex.Table) {
	t.Helper()
	cfg.Path = path
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	l, table, err := Open(cfg)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	return l, table
}

// reopen closes l and opens path again, returning the table it restores.
func reopen(t *testing.T, l *Log, path string) *mutex.Table {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	l2, table := openLog(t, path, Config{})
	if err := l2.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return table
}

// appendAll appends commands and waits for each; it returns their errors.
func appendAll(l *Log, cmds ...mutex.Command) []error {
	ps := make([]mutex.Pending, len(cmds))
	for i := range cmds {
		ps[i] = l.Append(&cmds[i])
	}
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p.Wait()
	}
	return errs
}

// mustAppend appends commands and fails t unless every one is durable.
func mustAppend(t *testing.T, l *Log, cmds ...mutex.Command) {
	t.Helper()
	for i, err := range appendAll(l, cmds...) {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
}

// replayFile returns the table the log at path replays to, without
// opening it as a Log.
func replayFile(t *testing.T, path string) *mutex.Table {
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
	table := mutex.NewTable()
	if _, err := scan(f, fi.Size(), newReplayer(table).apply); err != nil {
		t.Fatalf("replay %s: %v", path, err)
	}
	return table
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
	// err is what a failing call returns; nil means errInjected.
	err error
	// writePlan and syncPlan, when set, decide the next WriteAt and Sync
	// calls of any file in turn, whatever suffix says: true fails the
	// call. Past their end, writes and syncs count as before.
	writePlan, syncPlan []bool
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

// failure returns the error of a failing call.
func (fl *faults) failure() error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.err != nil {
		return fl.err
	}
	return errInjected
}

// faults is a Config.FS: the operating system's, with the failures it
// plans.
var _ FS = (*faults)(nil)

func (fl *faults) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if fl.take(&fl.opens) {
		return nil, &os.PathError{Op: "open", Path: name, Err: fl.failure()}
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, fl: fl, name: name}, nil
}

func (fl *faults) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

func (fl *faults) Remove(name string) error { return os.Remove(name) }

func (fl *faults) Free(dir string) (int64, error) { return osFS{}.Free(dir) }

type faultFile struct {
	File
	fl   *faults
	name string
}

// fail reports whether this call, counted by n, fails; plan, when it is
// not empty, decides instead.
func (f *faultFile) fail(plan *[]bool, n *int) bool {
	f.fl.mu.Lock()
	suffix := f.fl.suffix
	if plan != nil && len(*plan) > 0 {
		fail := (*plan)[0]
		*plan = (*plan)[1:]
		f.fl.mu.Unlock()
		return fail
	}
	f.fl.mu.Unlock()
	return strings.HasSuffix(f.name, suffix) && f.fl.take(n)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fail(&f.fl.writePlan, &f.fl.writes) {
		f.fl.mu.Lock()
		partial := f.fl.partial
		f.fl.mu.Unlock()
		n := 0
		if partial {
			n, _ = f.File.WriteAt(p[:len(p)/2], off)
		}
		return n, f.fl.failure()
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
	if f.fail(&f.fl.syncPlan, &f.fl.syncs) {
		return f.fl.failure()
	}
	return f.File.Sync()
}

func (f *faultFile) Truncate(size int64) error {
	if f.fail(nil, &f.fl.truncates) {
		return f.fl.failure()
	}
	return f.File.Truncate(size)
}
