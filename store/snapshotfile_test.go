package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A snapshot file reads back to the table written, and its end record
// counts and sums the records before it: a file cut at any record's end,
// with a flipped byte, with a record after the end or without the end is
// refused.
func TestSnapshotFile(t *testing.T) {
	want := model(history())
	var buf bytes.Buffer
	n, err := WriteSnapshotFile(&buf, want)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteSnapshotFile: %d bytes, %v; buffer has %d", n, err, buf.Len())
	}
	b := buf.Bytes()
	got, records, err := ReadSnapshotFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	sameTable(t, got, want)
	if len(exportOf(want)) != records {
		t.Fatalf("%d records read, the table exports %d", records, len(exportOf(want)))
	}
	var plain bytes.Buffer
	WriteSnapshot(&plain, want)
	if !bytes.HasPrefix(b, plain.Bytes()) {
		t.Fatal("the file does not begin with the snapshot records WriteSnapshot writes")
	}
	// Every record boundary, the last one (before the end) included.
	for off := 0; off < len(b); {
		if _, _, err := ReadSnapshotFile(bytes.NewReader(b[:off])); !errors.Is(err, ErrBadSnapshotFile) {
			t.Fatalf("cut at record boundary %d of %d: %v", off, len(b), err)
		}
		_, size, err := decodeRecord(b[off:])
		if err != nil {
			t.Fatalf("record at %d: %v", off, err)
		}
		off += size
	}
	for _, at := range []int{HeaderLen + 2, len(b) - 3} {
		flipped := bytes.Clone(b)
		flipped[at] ^= 0x01
		if _, _, err := ReadSnapshotFile(bytes.NewReader(flipped)); !errors.Is(err, ErrBadSnapshotFile) {
			t.Fatalf("a flipped byte at %d: %v", at, err)
		}
	}
	if _, _, err := ReadSnapshotFile(bytes.NewReader(append(bytes.Clone(b), plain.Bytes()[:plain.Len()]...))); !errors.Is(err, ErrBadSnapshotFile) {
		t.Fatalf("records after the end: %v", err)
	}
	// A whole end record over other records: the count or the sum differs.
	var other bytes.Buffer
	WriteSnapshotFile(&other, model(history()[:1]))
	end := other.Bytes()[len(other.Bytes())-(len(b)-plain.Len()):]
	if _, _, err := ReadSnapshotFile(bytes.NewReader(append(bytes.Clone(plain.Bytes()), end...))); !errors.Is(err, ErrBadSnapshotFile) {
		t.Fatalf("another table's end record: %v", err)
	}
	// The cluster's reader and the log's replay take no end record.
	if _, err := ReadSnapshot(bytes.NewReader(b)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("ReadSnapshot of a snapshot file: %v", err)
	}
	path := tempLogPath(t)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(Config{Path: path, Logger: testLogger(t)}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a snapshot file opened as a log: %v", err)
	}
}

// Restore writes a log that opens to the table restored, and refuses a
// data path that holds a log or that an open Log has locked, changing
// nothing.
func TestRestore(t *testing.T) {
	want := model(history())
	path := tempLogPath(t)
	if err := Restore(path, want); err != nil {
		t.Fatal(err)
	}
	l, got := openLog(t, path, Config{})
	sameTable(t, got, want)
	if records := exportOf(got); records[0] != exportOf(want)[0] {
		t.Fatalf("counters %+v, want %+v", records[0], exportOf(want)[0])
	}
	before, _ := os.ReadFile(path)
	if err := Restore(path, want); !errors.Is(err, ErrLocked) {
		t.Fatalf("restore over an open log: %v", err)
	}
	l.Close()
	if err := Restore(path, want); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("restore over a log: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a refused restore changed the log")
	}

	empty := filepath.Join(t.TempDir(), "locks.wal")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Restore(empty, want); err != nil {
		t.Fatalf("restore to an empty file: %v", err)
	}
	sameTable(t, replayFile(t, empty), want)
	if _, err := os.Stat(empty + tmpSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file left: %v", err)
	}
	if err := Restore(t.TempDir(), want); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("restore to a directory: %v", err)
	}
}
