package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/locking-center/locking-center/mutex"
	"github.com/prometheus/client_golang/prometheus"
)

func TestAppendSurvivesReopen(t *testing.T) {
	path := tempLogPath(t)
	l, grants := openLog(t, path, Config{})
	if len(grants) != 0 {
		t.Fatalf("new log restores %d grants", len(grants))
	}
	mustAppend(t, l, history()...)
	sameGrants(t, reopen(t, l, path), model(history()))
}

// Changes appended while a batch is being synced share the next write
// and the next fsync, and every Pending of a batch returns together.
func TestGroupCommit(t *testing.T) {
	fl := &faults{}
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{OpenFile: fl.openFile})
	syncs := l.Stats().Syncs // the directory's, for the new file
	entered, proceed := make(chan struct{}), make(chan struct{})
	fl.set(func(fl *faults) { fl.entered, fl.proceed = entered, proceed })

	first := l.Append(grant("first", "s", "a", epoch))
	<-entered // the writer is inside the fsync of the first batch
	const n = 100
	var wg sync.WaitGroup
	pendings := make([]mutex.Pending, n)
	for i := range n {
		wg.Go(func() { pendings[i] = l.Append(grant(fmt.Sprint("k", i), "s", "a", epoch)) })
	}
	wg.Wait()
	fl.set(func(fl *faults) { fl.entered, fl.proceed = nil, nil })
	proceed <- struct{}{}
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, p := range pendings {
		if err := p.Wait(); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	st := l.Stats()
	if st.Batches != 2 || st.Syncs-syncs != 2 || st.Changes != n+1 {
		t.Fatalf("stats %+v, want 2 batches, 2 fsyncs, %d changes", st, n+1)
	}

	// After a batch of many, the writer gathers the next batch for a
	// while; a change appended then and Close at once still get written.
	last := l.Append(release("first"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := last.Wait(); err != nil {
		t.Fatalf("change appended before Close: %v", err)
	}
	l2, grants := openLog(t, path, Config{})
	l2.Close()
	if len(grants) != n {
		t.Fatalf("restored %d grants, want %d", len(grants), n)
	}
}

// A batch whose write or fsync fails fails every Pending in it with an
// error wrapping mutex.ErrJournal, counts its changes, and leaves a log
// that replays as before the batch; the next batch is written normally.
func TestWriteFailure(t *testing.T) {
	tests := []struct {
		name   string
		inject func(*faults)
	}{
		{"write", func(fl *faults) { fl.writes = 1 }},
		{"partial write", func(fl *faults) { fl.writes, fl.partial = 1, true }},
		{"fsync", func(fl *faults) { fl.syncs = 1 }},
		{"fsync, then truncate", func(fl *faults) { fl.syncs, fl.truncates = 1, 1 }},
		{"write, then truncate and rewrite", func(fl *faults) { fl.writes, fl.truncates, fl.opens = 1, 1, 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fl := &faults{}
			reg := prometheus.NewRegistry()
			path := tempLogPath(t)
			l, _ := openLog(t, path, Config{OpenFile: fl.openFile, Registerer: reg})
			before := []mutex.Change{grant("held", "s", "a", epoch), grant("to-release", "s", "a", epoch)}
			mustAppend(t, l, before...)

			fl.set(tt.inject)
			errs := appendAll(l, grant("lost", "s", "a", epoch), release("to-release"))
			for i, err := range errs {
				if !errors.Is(err, mutex.ErrJournal) || !errors.Is(err, errInjected) {
					t.Fatalf("change %d: got %v, want ErrJournal wrapping the injected error", i, err)
				}
			}
			if v, _ := counterValue(t, reg, metricWriteErrors); v != 2 {
				t.Fatalf("write errors %v, want 2", v)
			}
			fl.set(func(fl *faults) { fl.writes, fl.syncs, fl.truncates, fl.opens = 0, 0, 0, 0 })
			sameGrants(t, replayFile(t, path), model(before))
			// The failed release is carried into the next batch; the
			// failed grant is gone.
			mustAppend(t, l, grant("next", "s", "a", epoch))
			sameGrants(t, reopen(t, l, path), model([]mutex.Change{
				grant("held", "s", "a", epoch), grant("next", "s", "a", epoch),
			}))
		})
	}
}

// While neither truncation nor a rewrite can restore the log, every batch
// fails without writing; once one works, writing goes on.
func TestBrokenUntilRecovered(t *testing.T) {
	fl := &faults{}
	reg := prometheus.NewRegistry()
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{OpenFile: fl.openFile, Registerer: reg})
	mustAppend(t, l, grant("a", "s", "a", epoch))
	fl.set(func(fl *faults) { fl.writes, fl.truncates, fl.opens = 1, 3, 3 })
	for i := range 3 {
		if errs := appendAll(l, grant(fmt.Sprint("fail", i), "s", "a", epoch)); !errors.Is(errs[0], mutex.ErrJournal) {
			t.Fatalf("batch %d: got %v, want ErrJournal", i, errs[0])
		}
	}
	if v, _ := counterValue(t, reg, metricWriteErrors); v != 3 {
		t.Fatalf("write errors %v, want 3", v)
	}
	mustAppend(t, l, release("a"), grant("b", "s", "a", epoch))
	sameGrants(t, reopen(t, l, path), model([]mutex.Change{grant("b", "s", "a", epoch)}))
}

// A compaction that fails before its rename leaves the old log in use,
// removes its temp file and counts no write error.
func TestCompactionFailureKeepsLog(t *testing.T) {
	fl := &faults{}
	reg := prometheus.NewRegistry()
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{OpenFile: fl.openFile, Registerer: reg, CompactMinSize: 1})
	mustAppend(t, l, grant("kept", "s", "a", epoch))
	fl.set(func(fl *faults) { fl.opens = 1 }) // the temp file cannot be created
	mustAppend(t, l, grant("x", "s", "a", epoch), release("x"))
	if _, err := os.Stat(path + tmpSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file after a failed compaction: %v", err)
	}
	fl.set(func(fl *faults) { fl.writes, fl.suffix = 1, tmpSuffix }) // the temp file cannot be written
	mustAppend(t, l, grant("y", "s", "a", epoch), grant("z", "s", "a", epoch), release("z"))
	if _, err := os.Stat(path + tmpSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file after a failed compaction: %v", err)
	}
	fl.mu.Lock()
	unused := fl.opens + fl.writes
	fl.mu.Unlock()
	if st := l.Stats(); unused != 0 || st.Compactions != 0 || st.WriteErrors != 0 {
		t.Fatalf("stats %+v with %d faults not reached; want both compactions tried and failed", st, unused)
	}
	if v, _ := counterValue(t, reg, metricWriteErrors); v != 0 {
		t.Fatalf("a failed compaction counted %v write errors", v)
	}
	mustAppend(t, l, grant("w", "s", "a", epoch), release("w"))
	if got := l.Stats().Compactions; got != 1 {
		t.Fatalf("%d compactions once the faults are gone, want 1", got)
	}
	sameGrants(t, reopen(t, l, path), model([]mutex.Change{grant("kept", "s", "a", epoch), grant("y", "s", "a", epoch)}))
}

// When the log has doubled over its held keys it is rewritten to hold
// just them; keys of any bytes come back exactly.
func TestCompaction(t *testing.T) {
	reg := prometheus.NewRegistry()
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{Registerer: reg, CompactMinSize: 4 << 10})
	mustAppend(t, l, history()...)
	for i := range 200 {
		key := fmt.Sprintf("churn\xff%d", i)
		mustAppend(t, l, grant(key, "src\x00", "127.0.0.1:9", epoch), release(key))
	}
	n, _ := counterValue(t, reg, metricCompactions)
	if n == 0 || l.Stats().Compactions != uint64(n) {
		t.Fatalf("compactions: counter %v, stats %d; want the same, above 0", n, l.Stats().Compactions)
	}
	if size := fileSize(t, path); size >= 8<<10 {
		t.Fatalf("log is %d bytes after compaction", size)
	}
	sameGrants(t, reopen(t, l, path), model(history()))
}

// Open rewrites a log that has grown past the threshold before serving.
func TestOpenCompacts(t *testing.T) {
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{CompactMinSize: 1 << 30})
	for i := range 100 {
		mustAppend(t, l, grant(fmt.Sprint(i), "s", "a", epoch), release(fmt.Sprint(i)))
	}
	mustAppend(t, l, history()...)
	l.Close()
	grown := fileSize(t, path)
	reg := prometheus.NewRegistry()
	l, grants := openLog(t, path, Config{Registerer: reg, CompactMinSize: 1})
	sameGrants(t, grants, model(history()))
	if v, _ := counterValue(t, reg, metricCompactions); v != 1 {
		t.Fatalf("compactions %v, want 1", v)
	}
	if size := fileSize(t, path); size >= grown/2 {
		t.Fatalf("log is %d bytes, was %d", size, grown)
	}
	sameGrants(t, reopen(t, l, path), model(history()))
}

// A temp file left by a compaction that crashed is never read, and Open
// removes it.
func TestOpenRemovesStrayTemp(t *testing.T) {
	path := tempLogPath(t)
	full, _ := encodeLog(history())
	os.WriteFile(path, full, 0o600)
	stray := appendRecord(nil, grant("only-in-temp", "s", "a", epoch))
	os.WriteFile(path+tmpSuffix, stray[:len(stray)-4], 0o600)
	_, grants := openLog(t, path, Config{})
	sameGrants(t, grants, model(history()))
	if _, err := os.Stat(path + tmpSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stray temp file still there: %v", err)
	}
}

func TestOpenTwiceIsLocked(t *testing.T) {
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{})
	_, _, err := Open(Config{Path: path})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprint("pid ", os.Getpid())) {
		t.Fatalf("second open: got %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	l.Close()
	l2, _ := openLog(t, path, Config{})
	l2.Close()
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	for _, path := range []string{
		filepath.Join(dir, "missing", "locks.wal"),
		filepath.Join(file, "locks.wal"),
		dir, // a directory, not a file
	} {
		if l, _, err := Open(Config{Path: path}); err == nil {
			l.Close()
			t.Fatalf("open %s succeeded", path)
		} else if !strings.Contains(err.Error(), path) {
			t.Fatalf("open %s: error %q does not name the path", path, err)
		}
	}
	if _, _, err := Open(Config{}); err == nil {
		t.Fatal("open with no path succeeded")
	}
}

// Both counters exist only on the registry of an open log.
func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	l, _ := openLog(t, tempLogPath(t), Config{Registerer: reg})
	for _, name := range []string{metricWriteErrors, metricCompactions} {
		if _, ok := counterValue(t, reg, name); !ok {
			t.Fatalf("%s not registered", name)
		}
	}
	l.Close()
	if _, ok := counterValue(t, reg, metricWriteErrors); ok {
		t.Fatal("counters stay registered after Close")
	}
}

func TestAppendRefused(t *testing.T) {
	reg := prometheus.NewRegistry()
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{Registerer: reg})
	big := strings.Repeat("k", MaxPayload)
	if err := l.Append(grant(big, "s", "a", epoch)).Wait(); !errors.Is(err, ErrTooLarge) || !errors.Is(err, mutex.ErrJournal) {
		t.Fatalf("huge key: got %v, want ErrTooLarge and ErrJournal", err)
	}
	mustAppend(t, l, grant("small", "s", "a", epoch))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := l.Append(grant("late", "s", "a", epoch)).Wait(); !errors.Is(err, ErrClosed) || !errors.Is(err, mutex.ErrJournal) {
		t.Fatalf("append after close: got %v, want ErrClosed and ErrJournal", err)
	}
	if got := l.Stats().WriteErrors; got != 2 {
		t.Fatalf("write errors %d, want 2", got)
	}
	l2, grants := openLog(t, path, Config{})
	l2.Close()
	sameGrants(t, grants, model([]mutex.Change{grant("small", "s", "a", epoch)}))
}

// After a compaction whose directory fsync failed, nothing is acknowledged
// from the new file until the rename is known to be on disk: while the
// directory cannot be synced, batches fail.
func TestDirSyncFailureAfterRename(t *testing.T) {
	fl := &faults{}
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{OpenFile: fl.openFile, CompactMinSize: 1})
	mustAppend(t, l, grant("kept", "s", "a", epoch))
	// The compaction's, then the recovery's and its rewrite's.
	fl.set(func(fl *faults) { fl.syncs, fl.suffix = 3, filepath.Dir(path) })
	mustAppend(t, l, grant("x", "s", "a", epoch), release("x"))
	if got := l.Stats().Compactions; got != 1 {
		t.Fatalf("%d compactions, want 1", got)
	}
	if errs := appendAll(l, grant("y", "s", "a", epoch)); !errors.Is(errs[0], mutex.ErrJournal) {
		t.Fatalf("batch after an unsynced rename: got %v, want ErrJournal", errs[0])
	}
	mustAppend(t, l, grant("z", "s", "a", epoch))
	sameGrants(t, reopen(t, l, path), model([]mutex.Change{grant("kept", "s", "a", epoch), grant("z", "s", "a", epoch)}))
}
