package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/mutex"
)

// The benchmarks write to a temp directory under $LC_BENCH_DIR, or under
// the system's temp directory when it is unset: point it at the disk to
// measure (a tmpfs has no fsync cost to speak of).
func benchDir(b *testing.B) string {
	b.Helper()
	parent := os.Getenv("LC_BENCH_DIR")
	if parent == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(parent, "lc-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// diskFsyncs measures how many appends of one small record, each followed
// by an fsync, the disk under dir completes per second.
func diskFsyncs(b *testing.B, dir string) float64 {
	b.Helper()
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	c := acquire("orders/batch-7", "10.0.0.4", "10.0.0.4:51314", epoch)
	rec := appendRecord(nil, &c)
	began := time.Now()
	n := 0
	for ; n < 200 || time.Since(began) < time.Second; n++ {
		if _, err := f.Write(rec); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(began).Seconds()
}

// BenchmarkDurableLockUnlock measures lock+unlock cycles over TCP against
// a server whose table is journaled to a Log, each client on its own key.
// One op is one cycle: two changes, each acknowledged only once synced.
// Next to it: the fsyncs per second the same disk does alone
// (disk-fsyncs/s), the fsyncs the Log issued per second (log-fsyncs/s) and
// the changes each fsync carried (changes/fsync).
func BenchmarkDurableLockUnlock(b *testing.B) {
	for _, clients := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			dir := benchDir(b)
			disk := diskFsyncs(b, dir)
			durableCycles(b, dir, clients, nil)
			b.ReportMetric(disk, "disk-fsyncs/s") // after the timer's reset, which drops metrics
		})
	}
}

// BenchmarkSlowDiskLockUnlock is BenchmarkDurableLockUnlock with 5 ms
// added to every fsync, as on a network block device: the rate is bound by
// the disk, and group commit is what keeps it from falling to one change
// per fsync.
func BenchmarkSlowDiskLockUnlock(b *testing.B) {
	for _, clients := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			durableCycles(b, benchDir(b), clients, slowFS{})
		})
	}
}

// slowFS is the operating system's file system with files whose Sync takes
// 5 ms longer.
type slowFS struct{ osFS }

func (slowFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return slowFile{f}, nil
}

// slowFile takes 5 ms longer for each Sync.
type slowFile struct{ File }

func (f slowFile) Sync() error {
	time.Sleep(5 * time.Millisecond)
	return f.File.Sync()
}

// durableCycles runs the cycles of b against a Log in dir on fsys (nil:
// the operating system's), and reports cycles/s, changes/fsync and
// log-fsyncs/s.
func durableCycles(b *testing.B, dir string, clients int, fsys FS) {
	l, table, err := Open(Config{Path: filepath.Join(dir, "locks.wal"), FS: fsys})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	_, c := serveTable(b, l, table)
	before := l.Stats()
	elapsed := cycles(b, c, clients)
	after := l.Stats()
	syncs := float64(after.Syncs - before.Syncs)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
	b.ReportMetric(float64(after.Changes-before.Changes)/syncs, "changes/fsync")
	b.ReportMetric(syncs/elapsed.Seconds(), "log-fsyncs/s")
}

// BenchmarkMemoryLockUnlock is BenchmarkDurableLockUnlock without a log:
// what the same cycles cost when no DATA_PATH is set.
func BenchmarkMemoryLockUnlock(b *testing.B) {
	for _, clients := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			_, c := serveTable(b, nil, nil)
			elapsed := cycles(b, c, clients)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
		})
	}
}

// cycles runs b.N lock+unlock cycles spread over clients goroutines, each
// on a key of its own, and returns the time they took.
func cycles(b *testing.B, c *lockingcenter.Client, clients int) time.Duration {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ResetTimer()
	began := time.Now()
	for i := range clients {
		key := fmt.Sprintf("bench/%d", i)
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := c.Lock(ctx, key); err != nil {
					errs <- err
					return
				}
				if err := c.Unlock(ctx, key); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return elapsed
}

// BenchmarkReplay measures Open of a compacted log that holds 1,000,000
// keys, one holder record each: reading, checking and decoding every
// record, building the log's table and the copy it returns.
func BenchmarkReplay(b *testing.B) {
	const keys = 1_000_000
	path := filepath.Join(benchDir(b), "locks.wal")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	t := mutex.NewTable()
	for i := range keys {
		c := acquire(fmt.Sprintf("orders/batch-%07d", i), "10.0.0.4", "10.0.0.4:51314", epoch.Add(time.Duration(i)))
		t.Apply(&c)
		t.TakeEvents()
	}
	if _, _, err := writeSnapshot(f, t); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		l, table, err := Open(Config{Path: path, CompactMinSize: 1 << 40})
		if err != nil {
			b.Fatal(err)
		}
		if n := table.Len(); n != keys {
			b.Fatalf("replayed %d keys, want %d", n, keys)
		}
		b.StopTimer()
		l.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(keys), "keys")
	b.ReportMetric(float64(fileSize(b, path))/(1<<20), "MiB")
}
