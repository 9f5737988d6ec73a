//go:build unix

package store

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// devNull returns os.DevNull after checking that it is a character device
// with nothing named like a lock or temp file beside it. At cleanup it
// fails t unless that is still so; a lock file that a broken Open created
// is removed, so that the check cannot leave it behind.
func devNull(t *testing.T) string {
	t.Helper()
	beside := []string{os.DevNull + lockSuffix, os.DevNull + tmpSuffix}
	fi, err := os.Stat(os.DevNull)
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Skipf("%s is not a character device here: %v", os.DevNull, err)
	}
	for _, p := range beside {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Skipf("%s exists already: %v", p, err)
		}
	}
	t.Cleanup(func() {
		if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
			t.Errorf("%s is no longer a character device: %v", os.DevNull, err)
		}
		for _, p := range beside {
			if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
				os.Remove(p)
				t.Errorf("%s was created", p)
			}
		}
	})
	return os.DevNull
}

// dirNames returns the sorted names in dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// A data path that exists and is not a regular file, directly or through
// a symbolic link, is refused with ErrNotRegular naming it, and nothing is
// created beside it or beside the link.
func TestOpenRefusesNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.wal")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock.wal")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sub := filepath.Join(dir, "sub.wal")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	linkDir := t.TempDir()
	link := filepath.Join(linkDir, "alias.wal")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, kind string }{
		{devNull(t), "character device"},
		{fifo, "named pipe"},
		{sock, "socket"},
		{sub, "directory"},
		{link, "named pipe"},
	} {
		before, beforeLink := dirNames(t, dir), dirNames(t, linkDir)
		l, _, err := Open(Config{Path: tt.path, Logger: testLogger(t)})
		if err == nil {
			l.Close()
			t.Fatalf("open %s succeeded", tt.path)
		}
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.kind) {
			t.Fatalf("open %s: got %v, want ErrNotRegular naming the path and %q", tt.path, err, tt.kind)
		}
		if after := dirNames(t, dir); !slices.Equal(after, before) {
			t.Fatalf("open %s: %s held %q, now %q", tt.path, dir, before, after)
		}
		if after := dirNames(t, linkDir); !slices.Equal(after, beforeLink) {
			t.Fatalf("open %s: %s held %q, now %q", tt.path, linkDir, beforeLink, after)
		}
	}
}

// A symbolic link to a missing file is refused before anything is created.
func TestOpenRefusesDanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "alias.wal")
	if err := os.Symlink(filepath.Join(dir, "missing.wal"), link); err != nil {
		t.Fatal(err)
	}
	_, _, err := Open(Config{Path: link})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), link) {
		t.Fatalf("open %s: got %v, want a missing-file error naming it", link, err)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"alias.wal"}) {
		t.Fatalf("%s holds %q, want only the link", dir, names)
	}
}

// symlinks makes an empty log at dir/real/locks.wal and returns its path
// and names for it through a link to the file, a relative link to the file
// and a link to its directory, in that order.
func symlinks(t *testing.T) (dir, real string, names []string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "real"), 0o700); err != nil {
		t.Fatal(err)
	}
	real = filepath.Join(dir, "real", "locks.wal")
	if err := os.WriteFile(real, nil, filePerm); err != nil {
		t.Fatal(err)
	}
	links := []struct{ target, name string }{
		{real, "alias.wal"},
		{filepath.Join("real", "locks.wal"), "relative.wal"},
		{filepath.Join(dir, "real"), "linked"},
	}
	for _, ln := range links {
		if err := os.Symlink(ln.target, filepath.Join(dir, ln.name)); err != nil {
			t.Fatal(err)
		}
	}
	names = []string{
		filepath.Join(dir, "alias.wal"),
		filepath.Join(dir, "relative.wal"),
		filepath.Join(dir, "linked", "locks.wal"),
	}
	return dir, real, names
}

// Every name of one log takes the same lock, whichever name opened it
// first; the lock file is made beside the real file only. A log that does
// not exist yet, opened through a linked directory, is created in the real
// one.
func TestOpenSymlinkSharesLock(t *testing.T) {
	dir, real, names := symlinks(t)
	all := append([]string{real}, names...)
	for _, first := range all {
		l, _ := openLog(t, first, Config{})
		for _, second := range all {
			_, _, err := Open(Config{Path: second})
			if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), real+lockSuffix) {
				t.Fatalf("%s open, then %s: got %v, want ErrLocked naming %s", first, second, err, real+lockSuffix)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(real); err != nil {
		t.Fatal(err)
	}
	l, _ := openLog(t, names[2], Config{})
	if _, err := os.Stat(real); err != nil {
		t.Fatalf("open %s did not create %s: %v", names[2], real, err)
	}
	if _, _, err := Open(Config{Path: real}); !errors.Is(err, ErrLocked) {
		t.Fatalf("%s open, then %s: got %v, want ErrLocked", names[2], real, err)
	}
	l.Close()
	if names := dirNames(t, dir); !slices.Equal(names, []string{"alias.wal", "linked", "real", "relative.wal"}) {
		t.Fatalf("%s holds %q, want the links and the real directory only", dir, names)
	}
}

// Compaction through a symbolic link rewrites the file it points to and
// leaves the link in place, pointing at the compacted log.
func TestCompactionThroughSymlink(t *testing.T) {
	dir, real, names := symlinks(t)
	alias := names[0]
	l, _ := openLog(t, alias, Config{CompactMinSize: 4 << 10})
	mustAppend(t, l, history()...)
	for i := range 200 {
		key := fmt.Sprint("churn/", i)
		mustAppend(t, l, acquire(key, "s", "127.0.0.1:9", epoch), release(key, epoch))
	}
	if got := l.Stats().Compactions; got == 0 {
		t.Fatal("no compaction ran")
	}
	if fi, err := os.Lstat(alias); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("%s is no longer a symbolic link (err %v)", alias, err)
	}
	if target, err := os.Readlink(alias); err != nil || target != real {
		t.Fatalf("%s points at %q (%v), want %s", alias, target, err, real)
	}
	if size := fileSize(t, real); size >= 8<<10 {
		t.Fatalf("%s is %d bytes after compaction", real, size)
	}
	if names := dirNames(t, filepath.Join(dir, "real")); !slices.Equal(names, []string{"locks.wal", "locks.wal.lock"}) {
		t.Fatalf("real directory holds %q", names)
	}
	sameTable(t, reopen(t, l, real), model(history()))
	sameTable(t, replayFile(t, alias), model(history()))
}
