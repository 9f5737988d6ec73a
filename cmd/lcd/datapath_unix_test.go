//go:build unix

package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// mustRefuse runs lcd on dataPath and returns what it wrote, failing t
// unless it exits 4 before it serves.
func mustRefuse(t *testing.T, dataPath string) string {
	t.Helper()
	p := runInProcess(t, dataPath)
	select {
	case <-p.exited:
	case <-p.log.started:
		p.stop()
		t.Fatalf("lcd on DATA_PATH=%s started:\n%s", dataPath, p.log)
	}
	if p.code != exitStore {
		t.Fatalf("lcd on DATA_PATH=%s: exit %d, want %d:\n%s", dataPath, p.code, exitStore, p.log)
	}
	return p.log.String()
}

// A DATA_PATH that is a character device or a named pipe exits 4 saying
// so, and lcd creates nothing: no lock file beside it, no file in its
// place.
func TestDataPathNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "locks.wal")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	devLock := os.DevNull + ".lock"
	if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Skipf("%s is not a character device here: %v", os.DevNull, err)
	}
	if _, err := os.Lstat(devLock); !errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s exists already: %v", devLock, err)
	}
	t.Cleanup(func() {
		if _, err := os.Lstat(devLock); !errors.Is(err, fs.ErrNotExist) {
			os.Remove(devLock)
			t.Errorf("%s was created", devLock)
		}
	})
	for _, tt := range []struct {
		path string
		kind fs.FileMode
		what string
	}{
		{os.DevNull, fs.ModeCharDevice, "character device"},
		{fifo, fs.ModeNamedPipe, "named pipe"},
	} {
		msg := mustRefuse(t, tt.path)
		if !strings.Contains(msg, "not a regular file") || !strings.Contains(msg, tt.path) || !strings.Contains(msg, tt.what) {
			t.Errorf("DATA_PATH=%s: want the path named as a %s:\n%s", tt.path, tt.what, msg)
		}
		if fi, err := os.Stat(tt.path); err != nil || fi.Mode()&tt.kind == 0 {
			t.Errorf("DATA_PATH=%s is no longer a %s (err %v)", tt.path, tt.what, err)
		}
	}
	if names, err := os.ReadDir(dir); err != nil || len(names) != 1 {
		t.Errorf("%s holds %v (err %v), want the named pipe only", dir, names, err)
	}
}

// A second lcd on a symbolic link to the log of a running lcd exits 4
// saying that the log is in use, and names the lock file beside the real
// log.
func TestDataPathOneProcessThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	path, alias := filepath.Join(dir, "locks.wal"), filepath.Join(dir, "alias.wal")
	if err := os.Symlink("locks.wal", alias); err != nil {
		t.Fatal(err)
	}
	first, _ := startSubprocess(t, path)
	if msg := mustRefuse(t, alias); !strings.Contains(msg, "in use by another process") || !strings.Contains(msg, path+".lock") {
		t.Fatalf("second lcd on %s: want it to say that %s is in use:\n%s", alias, path+".lock", msg)
	}
	if code := first.terminate(); code != exitOK {
		t.Fatalf("first lcd: exit %d:\n%s", code, first.log)
	}
	if _, err := os.Lstat(alias + ".lock"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s.lock was created beside the link (err %v)", alias, err)
	}
}
