package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/locking-center/locking-center/mutex"
	"github.com/prometheus/client_golang/prometheus"
)

// A write or fsync that finds the volume full is followed, once the file
// is truncated back to its synced prefix, by a rewrite of the log from the
// table after the batch, whatever the compaction threshold. When the
// rewrite succeeds the batch is durable: no command fails.
func TestNoSpaceRewritesWithTheBatch(t *testing.T) {
	for _, tt := range []struct {
		name   string
		inject func(*faults)
	}{
		{"write", func(fl *faults) { fl.writes, fl.err = 1, syscall.ENOSPC }},
		{"partial write", func(fl *faults) { fl.writes, fl.partial, fl.err = 1, true, syscall.ENOSPC }},
		{"fsync", func(fl *faults) { fl.syncs, fl.err = 1, syscall.ENOSPC }},
		{"quota", func(fl *faults) { fl.writes, fl.err = 1, syscall.EDQUOT }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fl := &faults{}
			reg := prometheus.NewRegistry()
			path := tempLogPath(t)
			l, _ := openLog(t, path, Config{FS: fl, Registerer: reg, CompactMinSize: 1 << 30})
			all := append(churn("c", 100), acquire("held", "s", "a", epoch), acquire("to-release", "s", "a", epoch))
			mustAppend(t, l, all...)
			grown := fileSize(t, path)

			fl.set(tt.inject)
			batch := acquire("new", "s", "a", epoch)
			mustAppend(t, l, batch)
			all = append(all, batch)
			if st := l.Stats(); st.Compactions != 1 || st.WriteErrors != 0 {
				t.Fatalf("stats %+v, want 1 compaction and no write error", st)
			}
			if v, _ := counterValue(t, reg, metricCompactions); v != 1 {
				t.Fatalf("compactions counter %v, want 1", v)
			}
			if size := fileSize(t, path); size >= grown/4 {
				t.Fatalf("log is %d bytes, was %d before the rewrite", size, grown)
			}
			// The new file is the log from now on.
			next := []mutex.Command{release("to-release", epoch), acquire("next", "s", "a", epoch)}
			mustAppend(t, l, next...)
			sameTable(t, reopen(t, l, path), model(append(all, next...)))
		})
	}
}

// The commands carried from an earlier failed batch are applied first to
// the table that the rewrite after a full volume writes, and are written
// once.
func TestNoSpaceRewriteTakesCarried(t *testing.T) {
	fl := &faults{}
	path := tempLogPath(t)
	l, _ := openLog(t, path, Config{FS: fl, CompactMinSize: 1 << 30})
	all := append(churn("c", 50), acquire("held", "s", "a", epoch), acquire("to-release", "s", "a", epoch))
	mustAppend(t, l, all...)
	fl.set(func(fl *faults) { fl.writes = 1 })
	carried := release("to-release", epoch)
	if err := appendAll(l, carried)[0]; !errors.Is(err, errInjected) {
		t.Fatalf("release: got %v, want the injected error", err)
	}
	fl.set(func(fl *faults) { fl.writes, fl.err = 1, syscall.ENOSPC })
	batch := acquire("to-release", "s2", "b", epoch)
	batch.Try = true // granted only after the carried release
	mustAppend(t, l, batch)
	if st := l.Stats(); st.Compactions != 1 || st.WriteErrors != 1 {
		t.Fatalf("stats %+v, want 1 compaction and 1 write error", st)
	}
	sameTable(t, reopen(t, l, path), model(append(all, carried, batch)))
}

// When the rewrite after a full volume fails, the batch fails as any
// failed write does and is carried into the next batch; when the rewrite
// was renamed into place but its directory could not be synced, the batch
// fails too, but the new file holds it: the Log syncs the directory
// before the next batch and does not write the batch again.
func TestNoSpaceRewriteFails(t *testing.T) {
	for _, tt := range []struct {
		name                string
		writePlan, syncPlan []bool
		compactions         uint64
	}{
		// the batch's write, the temp file's
		{"temp file full", []bool{true, true}, nil, 0},
		// the batch's write; the fsyncs of the truncated log, the temp
		// file, the directory
		{"directory not synced", []bool{true}, []bool{false, false, true}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fl := &faults{}
			path := tempLogPath(t)
			l, _ := openLog(t, path, Config{FS: fl, CompactMinSize: 1 << 30})
			all := append(churn("c", 50), acquire("held", "s", "a", epoch), acquire("to-release", "s", "a", epoch))
			mustAppend(t, l, all...)
			fl.set(func(fl *faults) { fl.writePlan, fl.syncPlan, fl.err = tt.writePlan, tt.syncPlan, syscall.ENOSPC })
			batch := acquire("lost", "s", "a", epoch)
			if err := appendAll(l, batch)[0]; !errors.Is(err, mutex.ErrJournal) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("got %v, want ErrJournal wrapping ENOSPC", err)
			}
			if st := l.Stats(); st.Compactions != tt.compactions || st.WriteErrors != 1 {
				t.Fatalf("stats %+v, want %d compactions and 1 write error", st, tt.compactions)
			}
			// A front end revokes the failed grant; the revoke follows it.
			next := []mutex.Command{{Op: mutex.OpRevoke, At: epoch, Key: "lost", Token: model(append(all, batch)).LastToken()},
				release("to-release", epoch), acquire("next", "s", "a", epoch)}
			mustAppend(t, l, next...)
			sameTable(t, reopen(t, l, path), model(append(append(all, batch), next...)))
		})
	}
}

// fillVolume writes a file beside the log that takes every block left on
// m's volume, and returns it.
func fillVolume(t *testing.T, m *memFS, dir string) File {
	t.Helper()
	free, err := m.Free(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.OpenFile(filepath.Join(dir, "filler"), os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, free), 0); err != nil {
		t.Fatal(err)
	}
	if free, _ := m.Free(dir); free != 0 {
		t.Fatalf("%d bytes free after filling the volume", free)
	}
	return f
}

// A volume that something else fills to the last block fails every
// write, releases included: a rewrite needs a block even for a table that
// holds no key, since the snapshot's state record keeps the fencing token
// counter. Once one block is free, the next write, which no longer fits as
// an append (it carries every command that failed), rewrites the log from
// the table after its batch, which takes one block; nothing is lost.
func TestFullVolumeRecovers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "locks.wal")
	m := newMemFS(16<<10, dir)
	cfg := Config{FS: m, Logger: slog.New(slog.DiscardHandler)}
	l, _ := openLog(t, path, cfg)
	all := []mutex.Command{acquire("held", "s", "a", epoch)}
	mustAppend(t, l, all...)
	filler := fillVolume(t, m, dir)

	key := strings.Repeat("k", mutex.MaxKeyLen)
	failed := 0
	for i := 0; i < 1000 && failed < 20; i++ {
		// Until the log's last block is full, the cycles fit into it.
		for _, c := range []mutex.Command{acquire(key, "s", "a", epoch), release(key, epoch)} {
			err := appendAll(l, c)[0]
			if err != nil && !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("cycle %d: %v", i, err)
			}
			if err != nil && c.Op == mutex.OpAcquire {
				failed++
			}
			all = append(all, c) // carried on when it failed
		}
	}
	if failed == 0 {
		t.Fatal("the volume never filled up")
	}
	c := release("held", epoch)
	if err := appendAll(l, c)[0]; !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("release of the last held key on a full volume: got %v, want ENOSPC", err)
	}
	all = append(all, c)
	compactions := l.Stats().Compactions

	if err := filler.Truncate(int64(len(memRead(t, m, filepath.Join(dir, "filler")))) - memBlock); err != nil {
		t.Fatal(err)
	}
	c = acquire("after", "s", "a", epoch)
	mustAppend(t, l, c)
	all = append(all, c)
	if got := l.Stats().Compactions; got != compactions+1 {
		t.Fatalf("%d compactions, want %d: the batch should have been written by a rewrite", got, compactions+1)
	}
	if size := memSize(m, path); size > memBlock {
		t.Fatalf("log is %d bytes after the rewrite, more than a block", size)
	}
	l.Close()
	_, table := openLog(t, path, cfg)
	sameTable(t, table, model(all))
}

// A compaction that finds no room on its volume is tried again as soon as
// the volume has room for it: when something else gives back the space
// it took, the log compacts before it fills that space with history, and
// the cycles go on.
func TestCompactionWaitsForRoom(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "locks.wal")
	m := newMemFS(16<<10, dir)
	l, _ := openLog(t, path, Config{FS: m, Logger: slog.New(slog.DiscardHandler)})
	held := acquire("held", "s", "a", epoch)
	mustAppend(t, l, held)
	filler := fillVolume(t, m, dir)
	key := strings.Repeat("k", mutex.MaxKeyLen)
	// Two cycles fit into the log's last block; compacting after them
	// finds no block free.
	for range 2 {
		mustAppend(t, l, acquire(key, "s", "a", epoch))
		mustAppend(t, l, release(key, epoch))
	}
	if err := m.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	filler.Close()
	for i := range 1000 {
		if err := appendAll(l, acquire(key, "s", "a", epoch))[0]; err != nil {
			t.Fatalf("cycle %d: acquire: %v", i, err)
		}
		if err := appendAll(l, release(key, epoch))[0]; err != nil {
			t.Fatalf("cycle %d: release: %v", i, err)
		}
	}
	if st := l.Stats(); st.Compactions == 0 {
		t.Fatalf("stats %+v, want compactions", st)
	}
}

// On a volume smaller than the compaction threshold, with a key held and
// lock and unlock cycles on another, the cycles go on for ever: the log is
// compacted while its volume still has room for the rewrite beside it.
// From 64 KiB on it takes no more than about half of the volume.
func TestSmallVolume(t *testing.T) {
	for _, capacity := range []int64{16 << 10, 256 << 10} {
		t.Run(fmt.Sprint(capacity), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "locks.wal")
			m := newMemFS(capacity, dir)
			cfg := Config{FS: m, Logger: slog.New(slog.DiscardHandler)}
			l, _ := openLog(t, path, cfg)
			held := acquire("held", "s", "a", epoch)
			mustAppend(t, l, held)
			key := strings.Repeat("k", mutex.MaxKeyLen)
			src := strings.Repeat("s", mutex.MaxSourceLen)
			const cycles = 3000 // a log of more than 1 MiB without compaction
			for i := range cycles {
				if err := appendAll(l, acquire(key, src, "[2001:db8::1]:54321", epoch))[0]; err != nil {
					t.Fatalf("cycle %d: acquire: %v", i, err)
				}
				if err := appendAll(l, release(key, epoch))[0]; err != nil {
					t.Fatalf("cycle %d: release: %v", i, err)
				}
				if size := memSize(m, path); capacity >= 2*compactFloor && size > capacity/2+memBlock {
					t.Fatalf("cycle %d: the log takes %d bytes of a volume of %d", i, size, capacity)
				}
				if i == cycles/2 {
					l.Close()
					l, _ = openLog(t, path, cfg)
				}
			}
			if st := l.Stats(); st.WriteErrors != 0 || st.Compactions == 0 {
				t.Fatalf("stats %+v, want compactions and no write error", st)
			}
			l.Close()
			_, table := openLog(t, path, cfg)
			sameTable(t, table, model([]mutex.Command{held}))
		})
	}
}

// memSize returns the size of the file name of m, -1 when it does not
// exist.
func memSize(m *memFS, name string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.lookup("stat", name)
	if err != nil || dir[base] == nil {
		return -1
	}
	return int64(len(dir[base].data))
}

// countingFS counts the calls of Free.
type countingFS struct {
	*memFS
	frees atomic.Int64
}

func (c *countingFS) Free(dir string) (int64, error) {
	c.frees.Add(1)
	return c.memFS.Free(dir)
}

// The free space of a roomy volume is asked for once at Open and once
// while the log grows past twice its snapshot, not at every batch.
func TestFreeSpaceAskedRarely(t *testing.T) {
	dir := t.TempDir()
	fsys := &countingFS{memFS: newMemFS(0, dir)}
	l, _ := openLog(t, filepath.Join(dir, "locks.wal"), Config{FS: fsys})
	for i := range 1000 {
		mustAppend(t, l, acquire(fmt.Sprint(i), "s", "a", epoch), release(fmt.Sprint(i), epoch))
	}
	if n := fsys.frees.Load(); n > 2 {
		t.Fatalf("free space asked for %d times", n)
	}
}

// Open compacts a log that is at least twice the size of its snapshot
// from 64 KiB on, whatever the compaction threshold.
func TestOpenCompactsFromFloor(t *testing.T) {
	held := []mutex.Command{acquire("held", "s", "a", epoch)}
	big, _ := encodeLog(append(churn("c", 1000), held...))
	small, _ := encodeLog(append(churn("c", 100), held...))
	var live []mutex.Command
	for i := range 1000 {
		live = append(live, acquire(fmt.Sprint("live/", i), "s", "a", epoch))
	}
	allLive, _ := encodeLog(live)
	if len(big) < compactFloor || len(small) >= compactFloor || len(allLive) < compactFloor {
		t.Fatalf("fixtures of %d, %d and %d bytes do not straddle %d", len(big), len(small), len(allLive), compactFloor)
	}
	for _, tt := range []struct {
		name    string
		data    []byte
		history []mutex.Command
		compact bool
	}{
		{"past the floor", big, append(churn("c", 1000), held...), true},
		{"below the floor", small, append(churn("c", 100), held...), false},
		{"all held", allLive, live, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.data)
			l, table := openLog(t, path, Config{})
			sameTable(t, table, model(tt.history))
			compacted := l.Stats().Compactions == 1
			if compacted != tt.compact {
				t.Fatalf("log of %d bytes: compacted %v, want %v", len(tt.data), compacted, tt.compact)
			}
			if size := fileSize(t, path); compacted && size >= int64(len(tt.data))/2 {
				t.Fatalf("log is %d bytes after compaction, was %d", size, len(tt.data))
			}
			sameTable(t, reopen(t, l, path), model(tt.history))
		})
	}
}

// Open warns when the log's volume has less free space than the
// compaction threshold.
func TestLowSpaceWarning(t *testing.T) {
	for _, tt := range []struct {
		capacity int64
		warn     bool
	}{
		{512 << 10, true},
		{0, false}, // unlimited
		{DefaultCompactMinSize + 64<<10, false},
	} {
		t.Run(fmt.Sprint(tt.capacity), func(t *testing.T) {
			dir := t.TempDir()
			logs := &records{}
			l, _ := openLog(t, filepath.Join(dir, "locks.wal"), Config{FS: newMemFS(tt.capacity, dir), Logger: slog.New(logs)})
			l.Close()
			warned := logs.find("less free space than the log's compaction threshold")
			if (warned != nil) != tt.warn {
				t.Fatalf("capacity %d: warned %v, want %v", tt.capacity, warned != nil, tt.warn)
			}
			if warned != nil && warned[logFree] != fmt.Sprint(tt.capacity) {
				t.Fatalf("warning names %v free bytes, want %d", warned[logFree], tt.capacity)
			}
		})
	}
}

// The operating system's FS tells the free space of a directory's volume,
// or that it cannot.
func TestOSFree(t *testing.T) {
	free, err := osFS{}.Free(t.TempDir())
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil || free <= 0 {
		t.Fatalf("free %d, %v; want a positive size", free, err)
	}
	if _, err := (osFS{}).Free(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("free space of a missing directory: got %v, want ErrNotExist", err)
	}
}

// records is a slog.Handler that keeps each message with its attributes.
type records struct {
	mu   sync.Mutex
	msgs []map[string]string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"msg": rec.Message}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	return nil
}

// find returns the first message that contains s, or nil.
func (r *records) find(s string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if strings.Contains(m["msg"], s) {
			return m
		}
	}
	return nil
}
