package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/store"
)

// sending is a fakeServer handler that answers b to the first bytes of a
// request and closes.
func sending(b []byte) func(net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
		var req [256]byte
		if _, err := c.Read(req[:]); err == nil {
			c.Write(b)
		}
	}
}

// A snapshot that is not one, from an older lcd ('-' alone) or cut short
// on the way, exits 2 with one line and leaves no file; a whole one is
// written.
func TestSnapshotSave(t *testing.T) {
	tb := mutex.NewTable()
	tb.Import(&mutex.Record{Kind: mutex.RecordState, LastToken: 7})
	tb.Import(&mutex.Record{Kind: mutex.RecordHolder, Key: "k", Token: 7, Source: "s"})
	tb.FinishImport()
	var whole bytes.Buffer
	if _, err := store.WriteSnapshotFile(&whole, tb); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		name   string
		answer []byte
		line   []string
	}{
		{"an older lcd", []byte("-"), []string{"takes no snapshots", "DATA_PATH"}},
		{"a stream cut short", append([]byte("+"), whole.Bytes()[:whole.Len()-5]...), []string{"bad snapshot file"}},
		{"a refusal", []byte("-\x08\x00\x04deny"), []string{"deny"}},
	} {
		addr := fakeServer(t, sending(tt.answer))
		file := filepath.Join(dir, "s.lcsnap")
		r := runInProcess(t, []string{"LC_MANAGER_ADDRESS=" + addr}, "snapshot", "save", file)
		if r.code != exitFailure {
			t.Errorf("%s: exit %d, want 2", tt.name, r.code)
		}
		oneLine(t, r.stderr, append([]string{addr}, tt.line...)...)
		for _, f := range []string{file, file + ".tmp"} {
			if _, err := os.Stat(f); !os.IsNotExist(err) {
				t.Errorf("%s: %s left: %v", tt.name, f, err)
			}
		}
	}
	addr := fakeServer(t, sending(append([]byte("+"), whole.Bytes()...)))
	file := filepath.Join(dir, "s.lcsnap")
	r := runInProcess(t, []string{"LC_MANAGER_ADDRESS=" + addr}, "snapshot", "save", file)
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("a whole snapshot: exit %d, stderr %q", r.code, r.stderr)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, whole.Bytes()) {
		t.Fatalf("the file holds %d bytes (%v), the server sent %d", len(got), err, whole.Len())
	}
}

func TestSnapshotUsage(t *testing.T) {
	for _, args := range [][]string{
		{"snapshot"}, {"snapshot", "copy"}, {"snapshot", "save"}, {"snapshot", "save", "a", "b"},
		{"snapshot", "restore", "f"}, {"snapshot", "restore", "f", "--data-path", "p", "--raft-dir", "d"},
		{"snapshot", "restore", "f", "--raft-dir", "d"}, {"snapshot", "restore", "f", "--data-path", "p", "--raft-peers", "n1=h:1"},
	} {
		r := runInProcess(t, nil, args...)
		if r.code != exitFailure {
			t.Errorf("%q: exit %d, want 2", args, r.code)
		}
		oneLine(t, r.stderr, "snapshot")
	}
}
