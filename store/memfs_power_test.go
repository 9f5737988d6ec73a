package store

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// memWrite writes p at off to the file name of m and fsyncs it when sync
// is set, failing t on any error.
func memWrite(t *testing.T, m *memFS, name string, p []byte, off int64, sync bool) {
	t.Helper()
	f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

// memSyncDir fsyncs the directory dir of m.
func memSyncDir(t *testing.T, m *memFS, dir string) {
	t.Helper()
	d, err := m.OpenFile(dir, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// memRead returns the bytes of name in m, or nil when it does not exist.
func memRead(t *testing.T, m *memFS, name string) []byte {
	t.Helper()
	f, err := m.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<40))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// After a power loss a file holds its synced bytes, then a prefix of the
// unsynced ones that ends at a sector boundary, then nothing, zeros to the
// end of the torn sector, or zeros to the end of the write; and across
// seeds each of those, nothing unsynced and everything, all come up.
func TestMemFSTornWrite(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	synced := bytes.Repeat([]byte{1}, 1000)
	unsynced := bytes.Repeat([]byte{2}, 1500)
	end := int64(len(synced) + len(unsynced))
	seen := map[string]bool{}
	for seed := range uint64(300) {
		m := newMemFS(0, dir)
		memWrite(t, m, name, synced, 0, true)
		memSyncDir(t, m, dir)
		memWrite(t, m, name, unsynced, int64(len(synced)), false)
		img, _ := m.afterPowerLoss(seed)
		got := memRead(t, img, name)
		if !bytes.Equal(got[:min(len(got), len(synced))], synced) || len(got) < len(synced) {
			t.Fatalf("seed %d: synced bytes not kept: %d bytes", seed, len(got))
		}
		kept := int64(len(synced))
		for kept < int64(len(got)) && got[kept] == 2 {
			kept++
		}
		zeros := int64(len(got)) - kept
		switch {
		case !bytes.Equal(got[kept:], make([]byte, zeros)):
			t.Fatalf("seed %d: after %d kept bytes the file holds more than zeros", seed, kept)
		case kept != end && kept != int64(len(synced)) && kept%sector != 0:
			t.Fatalf("seed %d: torn at %d, not at a sector boundary", seed, kept)
		case kept == int64(len(synced)) && zeros == 0:
			seen["nothing unsynced"] = true
		case kept == end:
			seen["everything"] = true
		case zeros == 0:
			seen["file ends at the tear"] = true
		case kept+zeros == end:
			seen["zeros to the end of the write"] = true
		case kept+zeros == min((kept/sector+1)*sector, end):
			seen["torn sector zeroed"] = true
		default:
			t.Fatalf("seed %d: %d bytes kept, then %d zeros", seed, kept, zeros)
		}
	}
	for _, want := range []string{"nothing unsynced", "everything", "file ends at the tear", "zeros to the end of the write", "torn sector zeroed"} {
		if !seen[want] {
			t.Errorf("no seed gave %q; seen %v", want, seen)
		}
	}
}

// A rename survives a power loss for certain only once its directory is
// synced; before that, some seeds keep it and some do not.
func TestMemFSRename(t *testing.T) {
	dir := t.TempDir()
	name, tmp := filepath.Join(dir, "log"), filepath.Join(dir, "log.tmp")
	for _, dirSync := range []bool{false, true} {
		seen := map[string]bool{}
		for seed := range uint64(100) {
			m := newMemFS(0, dir)
			memWrite(t, m, name, []byte("old"), 0, true)
			memSyncDir(t, m, dir)
			memWrite(t, m, tmp, []byte("new"), 0, true)
			if err := m.Rename(tmp, name); err != nil {
				t.Fatal(err)
			}
			if dirSync {
				memSyncDir(t, m, dir)
			}
			img, _ := m.afterPowerLoss(seed)
			seen[string(memRead(t, img, name))+"+"+string(memRead(t, img, tmp))] = true
		}
		want := map[string]bool{"new+": true}
		if !dirSync {
			// none of the changes, the temp file's creation only, or both
			want = map[string]bool{"old+": true, "old+new": true, "new+": true}
		}
		if len(seen) != len(want) {
			t.Fatalf("directory synced %v: images %v, want %v", dirSync, seen, want)
		}
		for k := range want {
			if !seen[k] {
				t.Fatalf("directory synced %v: images %v, want %v", dirSync, seen, want)
			}
		}
	}
}

// The power fails in the operation cutAfter names, and every operation
// after it fails too; what that operation wrote may survive.
func TestMemFSCut(t *testing.T) {
	dir := t.TempDir()
	m := newMemFS(0, dir)
	f, err := m.OpenFile(filepath.Join(dir, "f"), os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		t.Fatal(err)
	}
	m.cutAfter(2)
	if _, err := f.WriteAt([]byte("a"), 0); err != nil {
		t.Fatalf("first operation: %v", err)
	}
	if m.isLost() {
		t.Fatal("power lost after one operation")
	}
	if _, err := f.WriteAt([]byte("b"), 1); !errors.Is(err, errPowerLost) || !m.isLost() {
		t.Fatalf("second operation: got %v, want the power lost", err)
	}
	if err := f.Sync(); !errors.Is(err, errPowerLost) {
		t.Fatalf("after the cut: got %v, want errPowerLost", err)
	}
	if m.cutOp != "write f" {
		t.Fatalf("cut in %q, want \"write f\"", m.cutOp)
	}
}
