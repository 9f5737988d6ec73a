package cluster

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestParseLogStore(t *testing.T) {
	for in, want := range map[string]LogStore{"": LogStoreBoltDB, "boltdb": LogStoreBoltDB, "wal": LogStoreWAL} {
		if got, err := ParseLogStore(in); err != nil || got != want {
			t.Errorf("%q: %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"bolt", "WAL", " wal"} {
		if _, err := ParseLogStore(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := (Config{NodeID: "n1", RaftBind: "127.0.0.1:7000", ClientAddress: "127.0.0.1:1", Dir: "/x",
		LogStore: "raft-wal"}).Validate(); err == nil {
		t.Error("a config with an unknown log store is valid")
	}
}

// Each store keeps what it was given across a close, keeps its directory
// to one opener, and refuses a directory that holds the other store's
// files without creating any of its own there.
func TestLogStoreDirectory(t *testing.T) {
	hl := hclog.NewNullLogger()
	defer func(d time.Duration) { boltOpenTimeout = d }(boltOpenTimeout)
	boltOpenTimeout = 50 * time.Millisecond // the wait for raft.db's lock, when another has it
	for _, ls := range logStores {
		t.Run(string(ls), func(t *testing.T) {
			dir := t.TempDir()
			s, _, err := openLogStore(ls, dir, hl)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
				t.Fatal(err)
			}
			if _, _, err := openLogStore(ls, dir, hl); !errors.Is(err, ErrLocked) {
				t.Errorf("a second open while the first is open: %v, want ErrLocked", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("a second Close: %v", err)
			}
			if s, _, err = openLogStore(ls, dir, hl); err != nil {
				t.Fatalf("open again after Close: %v", err)
			}
			if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
				t.Errorf("read back %d, %v", v, err)
			}
			s.Close()

			other := LogStoreWAL
			if ls == LogStoreWAL {
				other = LogStoreBoltDB
			}
			if _, _, err := openLogStore(other, dir, hl); !errors.Is(err, ErrOtherLogStore) {
				t.Fatalf("%s opened a directory of %s: %v", other, ls, err)
			}
			if _, err := os.Stat(other.marker(dir)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused %s left %s: %v", other, other.marker(dir), err)
			}
		})
	}
}
