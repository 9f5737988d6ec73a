package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
	wal "github.com/locking-center/locking-center/store"
)

// startTimeout bounds the wait for lcd to start or to exit.
const startTimeout = 30 * time.Second

// lcdAddrs are the addresses lcd logs at start.
type lcdAddrs struct {
	Mutex   string `json:"mutex"`
	Manager string `json:"manager"`
	Metrics string `json:"metrics"`
	HTTP    string `json:"http"`
	Raft    string `json:"raft"` // a node of a cluster's raft port
}

// lcdLog collects lcd's JSON log and picks the addresses out of its
// "lcd started" line. It is safe for concurrent use.
type lcdLog struct {
	mu      sync.Mutex
	all     bytes.Buffer
	line    []byte
	addrs   lcdAddrs
	started chan struct{} // closed at the "lcd started" line
}

func newLCDLog() *lcdLog { return &lcdLog{started: make(chan struct{})} }

func (w *lcdLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		var rec struct {
			Msg string `json:"msg"`
			lcdAddrs
		}
		if json.Unmarshal(w.line[:i], &rec) == nil && rec.Msg == "lcd started" {
			w.addrs = rec.lcdAddrs
			close(w.started)
		}
		w.line = w.line[i+1:]
	}
}

// String returns everything lcd wrote so far.
func (w *lcdLog) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// waitStarted waits until lcd logged its addresses and answers on its
// mutex and management ports, and fails t if it exited first or took too
// long. (A stop before both ports serve makes lcd exit 1.)
func (w *lcdLog) waitStarted(t *testing.T, exited <-chan struct{}) lcdAddrs {
	t.Helper()
	select {
	case <-w.started:
		w.mu.Lock()
		addrs := w.addrs
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		// Unlocking a key nobody holds changes nothing.
		if err := lockingcenter.New(addrs.Mutex).Unlock(ctx, "lcd-test/ready"); err != nil {
			t.Fatalf("mutex port: %v", err)
		}
		if _, err := (&manager.Client{Addr: addrs.Manager}).Keys(ctx); err != nil {
			t.Fatalf("management port: %v", err)
		}
		return addrs
	case <-exited:
		t.Fatalf("lcd exited before it started:\n%s", w)
	case <-time.After(startTimeout):
		t.Fatalf("lcd did not start within %v:\n%s", startTimeout, w)
	}
	return lcdAddrs{}
}

// lcdEnv is the environment of an lcd on ports of 127.0.0.1 with its log in
// JSON, keeping its locks in dataPath.
func lcdEnv(dataPath string) []string {
	return []string{
		"BIND_ADDRESS=127.0.0.1:0",
		"DATA_PATH=" + dataPath,
		"LOG_FORMAT=json",
		"SHUTDOWN_TIMEOUT=1s",
	}
}

// inProcess is lcd's run function serving in a goroutine of the test.
type inProcess struct {
	cancel context.CancelFunc
	log    *lcdLog
	exited chan struct{}
	code   int
}

// runInProcess starts run with dataPath; the test ends it with stop, or
// t.Cleanup does.
func runInProcess(t *testing.T, dataPath string) *inProcess {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProcess{cancel: cancel, log: newLCDLog(), exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		p.code = run(ctx, []string{}, lcdEnv(dataPath), io.Discard, p.log)
	}()
	t.Cleanup(func() { p.stop() })
	return p
}

// stop cancels the run and returns its exit code.
func (p *inProcess) stop() int {
	p.cancel()
	<-p.exited
	return p.code
}

// writeLog writes commands to a new log at path, one Open per command, and
// returns the offset of every record and the size of the file.
func writeLog(t *testing.T, path string, changes []mutex.Command) []int64 {
	t.Helper()
	offs := make([]int64, 0, len(changes)+1)
	for _, c := range changes {
		fi, err := os.Stat(path)
		switch {
		case err == nil:
			offs = append(offs, fi.Size())
		case os.IsNotExist(err):
			offs = append(offs, 0)
		default:
			t.Fatal(err)
		}
		l, _, err := wal.Open(wal.Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Append(&c).Wait(); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return append(offs, fi.Size())
}

// changesLog writes restoreHistory() to a log in a new directory and
// returns the changes, the log's path, its bytes and the offsets of
// writeLog.
func changesLog(t *testing.T) ([]mutex.Command, string, []byte, []int64) {
	t.Helper()
	cs := restoreHistory()
	path := filepath.Join(t.TempDir(), "locks.wal")
	offs := writeLog(t, path, cs)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return cs, path, full, offs
}

var grantEpoch = time.Date(2024, 3, 1, 12, 0, 0, 987654321, time.UTC)

// acquireCmd and releaseCmd are v1 commands: on a free key an acquire is a
// grant.
func acquireCmd(key, src, remote string, at time.Time) mutex.Command {
	return mutex.Command{Op: mutex.OpAcquire, At: at, Key: key, Source: src, RemoteAddr: remote, ConnBound: true}
}

func releaseCmd(key string, at time.Time) mutex.Command {
	return mutex.Command{Op: mutex.OpRelease, At: at, Key: key}
}

// restoreHistory is a history with keys and sources of any bytes.
func restoreHistory() []mutex.Command {
	return []mutex.Command{
		acquireCmd("orders/batch-7", "10.0.0.4", "10.0.0.4:51314", grantEpoch),
		acquireCmd("\xff\xfe\x00bin", "src\x00\xff", "10.0.0.9:44120", grantEpoch.Add(time.Second)),
		acquireCmd("gone", "s", "127.0.0.1:3", grantEpoch),
		releaseCmd("gone", grantEpoch),
		acquireCmd("\x80", "", "[::1]:40000", grantEpoch.Add(-time.Hour)),
		acquireCmd("last", "pod-1", "10.1.1.1:9", grantEpoch.Add(2*time.Second)),
	}
}

// wantHolders is what the management port lists after the commands: one
// line per held key, sorted.
func wantHolders(cmds []mutex.Command) []string {
	t := mutex.NewTable()
	for i := range cmds {
		t.Apply(&cmds[i])
		t.TakeEvents()
	}
	var out []string
	t.Export(func(r *mutex.Record) {
		if r.Kind == mutex.RecordHolder {
			out = append(out, holderLine(r.Key, r.Source, r.RemoteAddr, r.Acquired))
		}
	})
	sort.Strings(out)
	return out
}

func holderLine(key, source, remote string, at time.Time) string {
	return fmt.Sprintf("%q src=%q remote=%q at=%d", key, source, remote, at.UnixNano())
}

// listHolders lists the held keys of the lcd whose management port is at addr.
func listHolders(t *testing.T, addr string) []manager.Holder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	hs, err := (&manager.Client{Addr: addr}).Holders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func holderLines(hs []manager.Holder) []string {
	var out []string
	for _, h := range hs {
		out = append(out, holderLine(h.Key, h.Source, h.RemoteAddr, h.Acquired))
	}
	sort.Strings(out)
	return out
}

func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// Cut anywhere inside its last record, the log is a torn write: lcd
// starts and serves the keys of the records before it.
func TestDataPathCutLastRecord(t *testing.T) {
	cs, path, full, offs := changesLog(t)
	last := len(cs) - 1
	want := wantHolders(cs[:last])
	for cut := offs[last]; cut < offs[last+1]; cut++ {
		if err := os.WriteFile(path, full[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		p := runInProcess(t, path)
		addrs := p.log.waitStarted(t, p.exited)
		sameLines(t, fmt.Sprintf("cut at %d", cut), holderLines(listHolders(t, addrs.Manager)), want)
		if code := p.stop(); code != exitOK {
			t.Fatalf("cut at %d: exit %d:\n%s", cut, code, p.log)
		}
	}
}

// Any byte flipped in a record in the middle of the log is corruption:
// lcd exits 4 and names the file and the record's offset.
func TestDataPathFlipMiddleRecord(t *testing.T) {
	cs, path, full, offs := changesLog(t)
	mid := len(cs) / 2
	wantMsg := fmt.Sprintf("%s: corrupt record at offset %d", path, offs[mid])
	for i := offs[mid]; i < offs[mid+1]; i++ {
		b := bytes.Clone(full)
		b[i] ^= 0x40
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		code := run(context.Background(), []string{}, lcdEnv(path), io.Discard, &stderr)
		if code != exitStore || !strings.Contains(stderr.String(), wantMsg) {
			t.Fatalf("byte %d flipped: exit %d, want %d with %q:\n%s", i, code, exitStore, wantMsg, stderr.String())
		}
	}
}

// A DATA_PATH that cannot be created exits 4 with the reason.
func TestDataPathNotCreatable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, reason string }{
		{filepath.Join(dir, "missing", "locks.wal"), "no such file or directory"},
		{filepath.Join(file, "locks.wal"), "not a directory"},
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), []string{}, lcdEnv(tt.path), io.Discard, &stderr)
		if code != exitStore || !strings.Contains(stderr.String(), tt.reason) || !strings.Contains(stderr.String(), tt.path) {
			t.Fatalf("DATA_PATH=%s: exit %d, want %d naming the path and %q:\n%s", tt.path, code, exitStore, tt.reason, stderr.String())
		}
	}
}

// While one lcd serves a DATA_PATH, a second one on it exits 4 and says
// why; once the first has stopped, the path is free again.
func TestDataPathOneProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	first := runInProcess(t, path)
	first.log.waitStarted(t, first.exited)
	var stderr bytes.Buffer
	code := run(context.Background(), []string{}, lcdEnv(path), io.Discard, &stderr)
	if code != exitStore || !strings.Contains(stderr.String(), "in use by another process") {
		t.Fatalf("second lcd: exit %d, want %d saying the path is in use:\n%s", code, exitStore, stderr.String())
	}
	if code := first.stop(); code != exitOK {
		t.Fatalf("first lcd: exit %d:\n%s", code, first.log)
	}
	again := runInProcess(t, path)
	again.log.waitStarted(t, again.exited)
}
