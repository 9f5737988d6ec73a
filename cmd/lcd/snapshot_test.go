package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
	wal "github.com/locking-center/locking-center/store"
)

var (
	lcCliOnce sync.Once
	lcCliPath string
	lcCliErr  error
)

// lcCli returns lc-cli built once for the test binary's run.
func lcCli(t *testing.T) string {
	t.Helper()
	lcCliOnce.Do(func() {
		lcCliPath = filepath.Join(filepath.Dir(lcdBinary), "lc-cli")
		out, err := exec.Command("go", "build", "-o", lcCliPath, "../lc-cli").CombinedOutput()
		if err != nil {
			lcCliErr = fmt.Errorf("build lc-cli: %v\n%s", err, out)
		}
	})
	if lcCliErr != nil {
		t.Fatal(lcCliErr)
	}
	return lcCliPath
}

// runLcCli runs lc-cli with args and env added to the test's environment,
// and returns its exit code, stdout and stderr.
func runLcCli(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(lcCli(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// saveUnderLoad runs v1 clients and sessions that acquire and release
// keys of their own at mutexAddr, and once they have made warm cycles,
// lc-cli snapshot save at managerAddr to file while they go on; then it
// stops them and returns the table the file holds.
func saveUnderLoad(t *testing.T, mutexAddr, managerAddr, file string, warm int64) *mutex.Table {
	t.Helper()
	stop := make(chan struct{})
	ready := make(chan struct{})
	var cycles atomic.Int64
	load := snapshotLoad(t, mutexAddr, stop, func() {
		if cycles.Add(1) == warm {
			close(ready)
		}
	})
	select {
	case <-ready:
	case <-time.After(time.Minute):
		t.Error("the load made too few cycles within a minute")
	}
	if t.Failed() {
		close(stop)
		load.Wait()
		t.FailNow()
	}
	before := cycles.Load()
	code, out, errOut := runLcCli(t, nil, "--manager-address", managerAddr, "snapshot", "save", file)
	during := cycles.Load() - before
	close(stop)
	load.Wait()
	if code != 0 || !strings.HasPrefix(out, file+": ") || errOut != "" {
		t.Fatalf("snapshot save at %s: exit %d, stdout %q, stderr %q", managerAddr, code, out, errOut)
	}
	t.Logf("%s(%d cycles of the load while it ran, %d in all)", out, during, cycles.Load())
	return readSnapshotFile(t, file)
}

// snapshotLoad runs v1 clients and sessions that acquire and release keys
// of their own at addr until stop is closed; cycle is called after each
// release.
func snapshotLoad(t *testing.T, addr string, stop <-chan struct{}, cycle func()) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			c := lockingcenter.New(addr, lockingcenter.WithSource(fmt.Sprintf("v1-%d", i)))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("v1/%d/%d", i, n%5)
				if n%50 == 0 {
					key = fmt.Sprintf("v1/%d/kept-%d", i, n) // held when the snapshot is taken
				}
				if err := c.Lock(ctx, key); err != nil {
					t.Errorf("lock %s: %v", key, err)
					return
				}
				if n%50 == 0 {
					continue
				}
				if err := c.Unlock(ctx, key); err != nil {
					t.Errorf("unlock %s: %v", key, err)
					return
				}
				cycle()
			}
		})
	}
	for i := range 2 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := lockingcenter.NewSession(ctx, addr, lockingcenter.WithSource(fmt.Sprintf("session-%d", i)))
			if err != nil {
				t.Errorf("session: %v", err)
				return
			}
			defer s.Close()
			held, err := s.Acquire(ctx, fmt.Sprintf("session/%d/held", i))
			if err != nil {
				t.Errorf("acquire: %v", err)
				return
			}
			_ = held
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				l, err := s.Acquire(ctx, fmt.Sprintf("session/%d/%d", i, n%4))
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				if err := l.Release(); err != nil {
					t.Errorf("release: %v", err)
					return
				}
				cycle()
			}
		})
	}
	return &wg
}

// holderTuples lists the holders of t: key, token, source, session, mode
// and count.
func holderTuples(t *mutex.Table) []string {
	var out []string
	t.Export(func(r *mutex.Record) {
		if r.Kind == mutex.RecordHolder {
			out = append(out, fmt.Sprintf("%q token=%d source=%q session=%d mode=%d count=%d", r.Key, r.Token, r.Source,
				r.Session, r.Mode, r.Count))
		}
	})
	slices.Sort(out)
	return out
}

// listedTuples is holderTuples of a management port's listing.
func listedTuples(hs []manager.Holder) []string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%q token=%d source=%q session=%d mode=%d count=%d", h.Key, h.Token, h.Source,
			h.Session, h.Mode, h.Count))
	}
	slices.Sort(out)
	return out
}

// sessionTuples lists t's sessions: id and name.
func sessionTuples(t *mutex.Table) []string {
	var out []string
	t.Export(func(r *mutex.Record) {
		if r.Kind == mutex.RecordSession {
			out = append(out, fmt.Sprintf("%d %q", r.Session, r.Name))
		}
	})
	return out
}

// lastToken is t's fencing token counter.
func lastToken(t *mutex.Table) uint64 {
	var last uint64
	t.Export(func(r *mutex.Record) {
		if r.Kind == mutex.RecordState {
			last = r.LastToken
		}
	})
	return last
}

func readSnapshotFile(t *testing.T, path string) *mutex.Table {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table, _, err := wal.ReadSnapshotFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// The backup and restore of docs/durability.md: a snapshot saved with
// lc-cli while v1 clients and sessions acquire and release, restored with
// lc-cli to a new data path, from which lcd serves the snapshot's holders
// and sessions, and grants tokens above every token in it. A restore over
// a log, and one of a damaged file, exit 2 with one line and write
// nothing.
func TestSnapshotSaveRestore(t *testing.T) {
	dir := t.TempDir()
	p, addrs := startSubprocess(t, filepath.Join(dir, "locks.wal"))
	file := filepath.Join(dir, "backup.lcsnap")
	saved := saveUnderLoad(t, addrs.Mutex, addrs.Manager, file, 200)
	if len(holderTuples(saved)) < 5 || len(sessionTuples(saved)) != 2 {
		t.Fatalf("the snapshot holds %v and sessions %v", holderTuples(saved), sessionTuples(saved))
	}
	if p.terminate() != 0 {
		t.Fatalf("lcd did not stop cleanly:\n%s", p.log)
	}

	restored := filepath.Join(t.TempDir(), "locks.wal")
	code, out, errOut := runLcCli(t, nil, "snapshot", "restore", file, "--data-path", restored)
	if code != 0 || !strings.HasPrefix(out, restored+": ") || errOut != "" {
		t.Fatalf("snapshot restore: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	p2, addrs2 := startSubprocess(t, restored)
	if got, want := listedTuples(listHolders(t, addrs2.Manager)), holderTuples(saved); !slices.Equal(got, want) {
		t.Errorf("the restored node holds\n%s\nthe snapshot\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	ss, err := (&manager.Client{Addr: addrs2.Manager}).Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sessions []string
	for _, s := range ss {
		sessions = append(sessions, fmt.Sprintf("%d %q", s.ID, s.Name))
	}
	if want := sessionTuples(saved); !slices.Equal(sessions, want) {
		t.Errorf("the restored node's sessions %v, the snapshot's %v", sessions, want)
	}
	if err := lockingcenter.New(addrs2.Mutex, lockingcenter.WithSource("after")).Lock(ctx, "after-the-restore"); err != nil {
		t.Fatal(err)
	}
	var highest uint64
	for _, h := range listHolders(t, addrs2.Manager) {
		if h.Key == "after-the-restore" {
			highest = h.Token
		}
	}
	if last := lastToken(saved); highest <= last {
		t.Errorf("a grant after the restore has token %d, not above the snapshot's last %d", highest, last)
	}

	// Refused, each with exit 2 and one line: a data path that holds a log
	// (the restored node's, stopped), and a damaged file.
	p2.terminate()
	logBefore, _ := os.ReadFile(restored)
	code, out, errOut = runLcCli(t, nil, "snapshot", "restore", file, "--data-path", restored)
	if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "not empty") {
		t.Errorf("restore over a log: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if logAfter, _ := os.ReadFile(restored); !bytes.Equal(logBefore, logAfter) {
		t.Error("a refused restore changed the log")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x04
	damaged := filepath.Join(dir, "damaged.lcsnap")
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(t.TempDir(), "locks.wal")
	code, out, errOut = runLcCli(t, nil, "snapshot", "restore", damaged, "--data-path", fresh)
	if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "snapshot") {
		t.Errorf("restore of a damaged file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("a refused restore wrote %s: %v", fresh, err)
	}
}
