package cluster

import (
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/locking-center/locking-center/mutex"
)

// ErrNotEmpty: Restore was pointed at a raft directory that holds
// something.
var ErrNotEmpty = errors.New("cluster: the raft directory is not empty")

// restoreTerm is the term of a restored snapshot: a cluster that starts
// from it elects its first leader in term 2.
const restoreTerm = 1

// Restore writes, in dir, the raft state of a new cluster of peers (every
// one a voter) whose table is t: a raft snapshot and nothing else, no log
// and no term. Start every node of peers on a directory Restore wrote
// with the same peers and table: each finds the snapshot (raft.
// HasExistingState), restores t from it and the configuration of peers,
// and the nodes elect a leader that goes on from the snapshot's position.
// The position is past t's highest fencing token (the token of the
// position's first grant is above it), so every grant after the restore
// has a token above t's. A node starts on the directory with either
// RAFT_LOG_STORE, which creates its empty log store beside the snapshot.
// dir must not exist or be empty. It returns the snapshot's position.
// peers are as ParsePeers returns them. Errors: ErrNotEmpty, or the file
// system's.
func Restore(dir string, peers []Peer, t *mutex.Table) (uint64, error) {
	if len(peers) == 0 {
		return 0, errors.New("cluster: restore: no peers")
	}
	switch entries, err := os.ReadDir(dir); {
	case err == nil && len(entries) > 0:
		return 0, fmt.Errorf("%w: %s holds %s; restore to a new or empty directory", ErrNotEmpty, dir, entries[0].Name())
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	var last uint64
	t.Export(func(r *mutex.Record) {
		if r.Kind == mutex.RecordState {
			last = r.LastToken
		}
	})
	index := last>>mutex.TokenShift + 1
	h := snapshotHeader{Format: snapshotFormat, Index: index}
	var conf raft.Configuration
	for _, p := range peers {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID),
			Address: raft.ServerAddress(p.RaftAddress)})
		h.Members = append(h.Members, p.toJSON())
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, DefaultRetainSnapshots, hclog.NewNullLogger())
	if err != nil {
		return 0, fmt.Errorf("cluster: restore: snapshots in %s: %w", dir, err)
	}
	_, trans := raft.NewInmemTransport("") // its EncodePeer only, for the snapshot's older list of peers
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, restoreTerm, conf, index, trans)
	if err != nil {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	if err := writeSnapshot(sink, &h, t); err != nil {
		sink.Cancel()
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	if err := sink.Close(); err != nil {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	return index, nil
}
