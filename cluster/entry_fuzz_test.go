package cluster

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// fuzzBatch returns the batch entry of cmds.
func fuzzBatch(cmds ...mutex.Command) []byte {
	var b batch
	for i := range cmds {
		b.data = appendCommandEntry(b.data, &cmds[i])
		b.ends = append(b.ends, len(b.data))
	}
	return b.entry()
}

// Any bytes decode to an entry or to errEntry, never a panic; a command
// or batch entry decoded is written again to the same commands.
func FuzzDecodeEntry(f *testing.F) {
	at := time.Unix(0, 1_700_000_000_000_000_001)
	acq := mutex.Command{Op: mutex.OpAcquire, At: at, Key: "k", Source: "s", Session: 3, Request: 9, Proposer: 1 << 63, Proposal: 7}
	rel := mutex.Command{Op: mutex.OpRelease, At: at, Key: "k", Token: 1 << 40, Session: 3, Proposer: 1, Proposal: 8}
	f.Add(appendCommandEntry(nil, &acq))
	f.Add(fuzzBatch(acq, rel))
	f.Add(fuzzBatch(rel, acq, rel))
	f.Add(memberEntry(Peer{ID: "n1", RaftAddress: "10.0.0.1:7000", ClientAddress: "10.0.0.1:22119", Batches: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			if !errors.Is(err, errEntry) {
				t.Fatalf("%q: %v", b, err)
			}
			return
		}
		var cmds []mutex.Command
		switch e.kind {
		case entryCommand:
			cmds = []mutex.Command{e.cmd}
		case entryBatch:
			cmds = e.cmds
		default:
			return
		}
		again, err := decodeEntry(fuzzBatch(cmds...))
		if err != nil {
			t.Fatalf("written again: %v", err)
		}
		got := []mutex.Command{again.cmd}
		if again.kind == entryBatch {
			got = again.cmds
		}
		if !reflect.DeepEqual(got, cmds) {
			t.Fatalf("written again:\n got %+v\nwant %+v", got, cmds)
		}
	})
}
