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
	l, table := openLog(t, path, Config{})
	if n := table.Len(); n != 0 {
		t.Fatalf("new log restores %d keys", n)
	}
	mustAppend(t, l, history()...)
	sameTable(t, reopen(t, l, path), model(history()))
}

// Changes appended while a batch is being synced share the next write
// and the next fsync, and every Pending of a batch returns together.
func TestGroupCommit(t *testing.T) {
	fl := &faults{}
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{FS: fl})
	syncs := l.Stats().Syncs // the directory's, for the new file
	entered, proceed := make(chan struct{}), make(chan struct{})
	fl.set(func(fl *faults) { fl.entered, fl.proceed = entered, proceed })

	c := acquire("first", "s", "a", epoch)
	first := l.Append(&c)
	<-entered // the writer is inside the fsync of the first batch
	const n = 100
	var wg sync.WaitGroup
	pendings := make([]mutex.Pending, n)
	for i := range n {
		wg.Go(func() {
			c := acquire(fmt.Sprint("k", i), "s", "a", epoch)
			pendings[i] = l.Append(&c)
		})
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
	r := release("first", epoch)
	last := l.Append(&r)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := last.Wait(); err != nil {
		t.Fatalf("change appended before Close: %v", err)
	}
	l2, table := openLog(t, path, Config{})
	l2.Close()
	if got := table.Len(); got != n {
		t.Fatalf("restored %d keys, want %d", got, n)
	}
}

// A batch whose write or fsync fails fails every Pending in it with an
// error wrapping mutex.ErrJournal, counts its commands, and leaves a log
// that replays as before the batch; the failed commands are written with
// the next batch, in front of it, so the log stays the table's history.
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
			l, _ := openLog(t, path, Config{FS: fl, Registerer: reg})
			before := []mutex.Command{acquire("held", "s", "a", epoch), acquire("to-release", "s", "a", epoch)}
			mustAppend(t, l, before...)

			// Both changes go into one batch: they are appended while the
			// writer is inside the fsync of a batch before them, whose
			// write and fsync the plans let through.
			entered, proceed := make(chan struct{}), make(chan struct{})
			fl.set(func(fl *faults) {
				fl.entered, fl.proceed = entered, proceed
				fl.writePlan, fl.syncPlan = []bool{false}, []bool{false}
				tt.inject(fl)
			})
			filler := acquire("filler", "s", "a", epoch)
			first := l.Append(&filler)
			<-entered
			lost, rel := acquire("lost", "s", "a", epoch), release("to-release", epoch)
			ps := []mutex.Pending{l.Append(&lost), l.Append(&rel)}
			fl.set(func(fl *faults) { fl.entered, fl.proceed = nil, nil })
			close(proceed)
			if err := first.Wait(); err != nil {
				t.Fatalf("the batch before: %v", err)
			}
			before = append(before, filler)
			errs := []error{ps[0].Wait(), ps[1].Wait()}
			for i, err := range errs {
				if !errors.Is(err, mutex.ErrJournal) || !errors.Is(err, errInjected) {
					t.Fatalf("change %d: got %v, want ErrJournal wrapping the injected error", i, err)
				}
			}
			if v, _ := counterValue(t, reg, metricWriteErrors); v != 2 {
				t.Fatalf("write errors %v, want 2", v)
			}
			fl.set(func(fl *faults) { fl.writes, fl.syncs, fl.truncates, fl.opens = 0, 0, 0, 0 })
			sameTable(t, replayFile(t, path), model(before))
			// The failed batch is carried into the next one. (A front end
			// revokes a grant whose Pending failed; that revoke follows.)
			mustAppend(t, l, acquire("next", "s", "a", epoch))
			sameTable(t, reopen(t, l, path), model(append(before,
				acquire("lost", "s", "a", epoch), release("to-release", epoch), acquire("next", "s", "a", epoch))))
		})
	}
}

// While neither truncation nor a rewrite can restore the log, every batch
// fails without writing; once one works, writing goes on.
func TestBrokenUntilRecovered(t *testing.T) {
	fl := &faults{}
	reg := prometheus.NewRegistry()
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{FS: fl, Registerer: reg})
	mustAppend(t, l, acquire("a", "s", "a", epoch))
	fl.set(func(fl *faults) { fl.writes, fl.truncates, fl.opens = 1, 3, 3 })
	for i := range 3 {
		if errs := appendAll(l, acquire(fmt.Sprint("fail", i), "s", "a", epoch)); !errors.Is(errs[0], mutex.ErrJournal) {
			t.Fatalf("batch %d: got %v, want ErrJournal", i, errs[0])
		}
	}
	if v, _ := counterValue(t, reg, metricWriteErrors); v != 3 {
		t.Fatalf("write errors %v, want 3", v)
	}
	mustAppend(t, l, release("a", epoch), acquire("b", "s", "a", epoch))
	want := []mutex.Command{acquire("a", "s", "a", epoch)}
	for i := range 3 {
		want = append(want, acquire(fmt.Sprint("fail", i), "s", "a", epoch))
	}
	want = append(want, release("a", epoch), acquire("b", "s", "a", epoch))
	sameTable(t, reopen(t, l, path), model(want))
}

// churn returns n acquires and releases of a key named name, one after the
// other: commands that grow the log and leave the table as it was.
func churn(name string, n int) []mutex.Command {
	var out []mutex.Command
	for i := range n {
		key := fmt.Sprint(name, i)
		out = append(out, acquire(key, "s", "a", epoch), release(key, epoch))
	}
	return out
}

// A compaction that fails before its rename leaves the old log in use,
// removes its temp file and counts no write error. Each command is a batch
// of its own, so that the compaction after each is known.
func TestCompactionFailureKeepsLog(t *testing.T) {
	fl := &faults{}
	reg := prometheus.NewRegistry()
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{FS: fl, Registerer: reg, CompactMinSize: 1})
	var all []mutex.Command
	add := func(cmds ...mutex.Command) {
		t.Helper()
		for _, c := range cmds {
			mustAppend(t, l, c)
			all = append(all, c)
		}
	}
	pending := func() int {
		fl.mu.Lock()
		defer fl.mu.Unlock()
		return fl.opens + fl.writes
	}
	add(acquire("kept", "s", "a", epoch))
	for i, inject := range []func(*faults){
		func(fl *faults) { fl.opens = 1 },                        // the temp file cannot be created
		func(fl *faults) { fl.writes, fl.suffix = 1, tmpSuffix }, // the temp file cannot be written
	} {
		fl.set(inject)
		cmds := churn(fmt.Sprint("x", i, "/"), 50)
		for j := 0; pending() > 0; j++ {
			if j == len(cmds) {
				t.Fatalf("fault %d: no compaction was tried", i)
			}
			add(cmds[j])
		}
		if _, err := os.Stat(path + tmpSuffix); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("fault %d: temp file after a failed compaction: %v", i, err)
		}
		if st := l.Stats(); st.Compactions != 0 || st.WriteErrors != 0 {
			t.Fatalf("fault %d: stats %+v; want the compaction failed and no write error", i, st)
		}
	}
	if v, _ := counterValue(t, reg, metricWriteErrors); v != 0 {
		t.Fatalf("a failed compaction counted %v write errors", v)
	}
	add(churn("w", 1)...)
	if got := l.Stats().Compactions; got != 1 {
		t.Fatalf("%d compactions once the faults are gone, want 1", got)
	}
	sameTable(t, reopen(t, l, path), model(all))
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
		mustAppend(t, l, acquire(key, "src\x00", "127.0.0.1:9", epoch), release(key, epoch))
	}
	n, _ := counterValue(t, reg, metricCompactions)
	if n == 0 || l.Stats().Compactions != uint64(n) {
		t.Fatalf("compactions: counter %v, stats %d; want the same, above 0", n, l.Stats().Compactions)
	}
	if size := fileSize(t, path); size >= 8<<10 {
		t.Fatalf("log is %d bytes after compaction", size)
	}
	sameTable(t, reopen(t, l, path), model(history()))
}

// Open rewrites a log that has grown past the threshold before serving.
func TestOpenCompacts(t *testing.T) {
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{CompactMinSize: 1 << 30})
	var all []mutex.Command
	for i := range 100 {
		all = append(all, acquire(fmt.Sprint(i), "s", "a", epoch), release(fmt.Sprint(i), epoch))
	}
	all = append(all, history()...)
	mustAppend(t, l, all...)
	l.Close()
	grown := fileSize(t, path)
	reg := prometheus.NewRegistry()
	l, table := openLog(t, path, Config{Registerer: reg, CompactMinSize: 1})
	sameTable(t, table, model(all))
	if v, _ := counterValue(t, reg, metricCompactions); v != 1 {
		t.Fatalf("compactions %v, want 1", v)
	}
	if size := fileSize(t, path); size >= grown/2 {
		t.Fatalf("log is %d bytes, was %d", size, grown)
	}
	sameTable(t, reopen(t, l, path), model(all))
}

// A temp file left by a compaction that crashed is never read, and Open
// removes it.
func TestOpenRemovesStrayTemp(t *testing.T) {
	path := tempLogPath(t)
	full, _ := encodeLog(history())
	os.WriteFile(path, full, 0o600)
	c := acquire("only-in-temp", "s", "a", epoch)
	stray := appendRecord(nil, &c)
	os.WriteFile(path+tmpSuffix, stray[:len(stray)-4], 0o600)
	_, table := openLog(t, path, Config{})
	sameTable(t, table, model(history()))
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
	c := acquire(big, "s", "a", epoch)
	if err := l.Append(&c).Wait(); !errors.Is(err, ErrTooLarge) || !errors.Is(err, mutex.ErrJournal) {
		t.Fatalf("huge key: got %v, want ErrTooLarge and ErrJournal", err)
	}
	mustAppend(t, l, acquire("small", "s", "a", epoch))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	c = acquire("late", "s", "a", epoch)
	if err := l.Append(&c).Wait(); !errors.Is(err, ErrClosed) || !errors.Is(err, mutex.ErrJournal) {
		t.Fatalf("append after close: got %v, want ErrClosed and ErrJournal", err)
	}
	if got := l.Stats().WriteErrors; got != 2 {
		t.Fatalf("write errors %d, want 2", got)
	}
	l2, table := openLog(t, path, Config{})
	l2.Close()
	sameTable(t, table, model([]mutex.Command{acquire("small", "s", "a", epoch)}))
}

// After a compaction whose directory fsync failed, nothing is acknowledged
// from the new file until the rename is known to be on disk: while the
// directory cannot be synced, batches fail.
func TestDirSyncFailureAfterRename(t *testing.T) {
	fl := &faults{}
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{FS: fl, CompactMinSize: 1})
	// The churn must be one batch, so that the compaction comes after it
	// and not between two of its batches: it is appended while the writer
	// is held in the fsync of the batch before.
	entered, proceed := make(chan struct{}), make(chan struct{})
	fl.set(func(fl *faults) { fl.entered, fl.proceed = entered, proceed })
	kept := acquire("kept", "s", "a", epoch)
	first := l.Append(&kept)
	<-entered
	cmds := churn("x", 5)
	pendings := make([]mutex.Pending, len(cmds))
	for i := range cmds {
		pendings[i] = l.Append(&cmds[i])
	}
	// The compaction's, then the recovery's and its rewrite's.
	fl.set(func(fl *faults) {
		fl.entered, fl.proceed = nil, nil
		fl.syncs, fl.suffix = 3, filepath.Dir(path)
	})
	proceed <- struct{}{}
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, p := range pendings {
		if err := p.Wait(); err != nil {
			t.Fatalf("churn command %d: %v", i, err)
		}
	}
	if got := l.Stats().Compactions; got != 1 {
		t.Fatalf("%d compactions, want 1", got)
	}
	if errs := appendAll(l, acquire("y", "s", "a", epoch)); !errors.Is(errs[0], mutex.ErrJournal) {
		t.Fatalf("batch after an unsynced rename: got %v, want ErrJournal", errs[0])
	}
	mustAppend(t, l, acquire("z", "s", "a", epoch))
	want := append([]mutex.Command{acquire("kept", "s", "a", epoch)}, churn("x", 5)...)
	sameTable(t, reopen(t, l, path), model(append(want, acquire("y", "s", "a", epoch), acquire("z", "s", "a", epoch))))
}
