package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/locking-center/locking-center/mutex"
)

// Restore writes one raft snapshot, past the table's last token, of the
// peers' configuration, holding the table; a directory that holds
// anything is refused and left as it was.
func TestRestore(t *testing.T) {
	tb := mutex.NewTable()
	tb.Import(&mutex.Record{Kind: mutex.RecordState, LastToken: 5<<mutex.TokenShift + 3})
	tb.Import(&mutex.Record{Kind: mutex.RecordHolder, Key: "k", Token: 5<<mutex.TokenShift + 3, Source: "s"})
	tb.FinishImport()
	peers, err := ParsePeers("n1=127.0.0.1:1=127.0.0.1:2,n2=127.0.0.1:3")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "raft")
	index, err := Restore(dir, peers, tb)
	if err != nil || index != 6 {
		t.Fatalf("restore: position %d, %v; want 6", index, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, DefaultRetainSnapshots, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("snapshots %v, %v", list, err)
	}
	meta, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if meta.Index != 6 || len(meta.Configuration.Servers) != 2 || meta.Configuration.Servers[1].Address != "127.0.0.1:3" {
		t.Fatalf("snapshot meta %+v", meta)
	}
	h, got, err := readSnapshot(rc)
	if err != nil {
		t.Fatal(err)
	}
	if h.Index != 6 || len(h.Members) != 2 || h.Members[0].Client != "127.0.0.1:2" {
		t.Fatalf("snapshot header %+v", h)
	}
	if TableDigest(got) != TableDigest(tb) {
		t.Fatal("the snapshot's table differs from the one restored")
	}
	if _, err := Restore(dir, peers, tb); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("restore over a restored directory: %v", err)
	}
	if again, _ := snaps.List(); len(again) != 1 {
		t.Fatalf("a refused restore left %d snapshots", len(again))
	}
	if _, err := os.Stat(filepath.Join(dir, snapshotsDir)); err != nil {
		t.Fatal(err)
	}
}
