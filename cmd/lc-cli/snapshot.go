package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/locking-center/locking-center/cluster"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/store"
	"github.com/spf13/cobra"
)

func newSnapshotCommand(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save a snapshot of the lock table, or restore one into a data directory",
		Long: `snapshot save takes a consistent snapshot of the whole lock table while the
server serves, through the management port, and writes it to a file;
snapshot restore writes a data path (DATA_PATH) or a cluster node's
RAFT_DIR from such a file, for an lcd that is not running.

A snapshot file is the records of a compacted write-ahead log, each with
its CRC32C, followed by an end record with their count and the CRC32C of
them all (docs/protocol.md). See docs/durability.md and docs/ha.md.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("snapshot takes a command: save or restore (see lc-cli snapshot --help)")
			}
			return usagef("snapshot: unknown command %q: want save or restore (see lc-cli snapshot --help)", args[0])
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	cmd.AddCommand(newSnapshotSaveCommand(f), newSnapshotRestoreCommand())
	return cmd
}

func newSnapshotSaveCommand(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "save FILE",
		Short: "Write a snapshot of the table, taken online, to FILE",
		Long: `snapshot save asks the server at --manager-address for a snapshot of its
table, taken at one instant while it serves, checks it as it will be
read (every record's CRC32C and the end record's count and CRC32C), and
writes it to FILE (through FILE.tmp, fsynced and renamed into place, so
FILE is whole or as it was). With authentication on it takes an admin's
--token. In a cluster only the leader gives a snapshot, holding every
change acknowledged before it was asked; a follower refuses and names
the leader. --timeout bounds each read of the snapshot, not the whole:
the node sends nothing while it copies its table, which for a million
keys takes seconds. It prints one line: the keys, holders, sessions and
bytes saved.`,
		Args: oneFile("snapshot save"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := f.managers()
			if err != nil {
				return err
			}
			var line string
			err = interruptibly(cmd.Context(), f.sys.Signals, "snapshot at "+m.Addr(), func(ctx context.Context) error {
				return m.atLeader(ctx, true, func(ctx context.Context, c *manager.Client) (err error) {
					line, err = saveSnapshot(ctx, c, args[0])
					return err
				})
			}, nil)
			if err != nil {
				return asFailure(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
}

// oneFile takes exactly one argument, a file name, for the command name.
func oneFile(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 || args[0] == "" {
			return usagef("%s takes one file name, got %d arguments (see lc-cli %s --help)", name, len(args), name)
		}
		return nil
	}
}

// saveSnapshot writes m's snapshot to path and returns the line that
// says what it holds.
func saveSnapshot(ctx context.Context, m *manager.Client, path string) (string, error) {
	tmp := path + ".tmp"
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	keep := false
	defer func() {
		if !keep {
			out.Close()
			os.Remove(tmp)
		}
	}()
	n, err := m.Snapshot(ctx, out)
	if errors.Is(err, manager.ErrNoSnapshots) {
		return "", fmt.Errorf("%w: stop it and copy its DATA_PATH instead (docs/durability.md)", err)
	}
	if err != nil {
		return "", err
	}
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	t, _, err := store.ReadSnapshotFile(out)
	if err != nil {
		return "", fmt.Errorf("the snapshot from %s: %w", m.Addr, err)
	}
	if err := out.Sync(); err != nil {
		return "", err
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	keep = true
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return fmt.Sprintf("%s: %s, %d bytes, from %s", path, describeTable(t), n, m.Addr), nil
}

// describeTable says how many keys, holders and sessions t has, and its
// last fencing token.
func describeTable(t *mutex.Table) string {
	var keys, holders, sessions int
	var last uint64
	key := ""
	t.Export(func(r *mutex.Record) {
		switch r.Kind {
		case mutex.RecordState:
			last = r.LastToken
		case mutex.RecordSession:
			sessions++
		case mutex.RecordHolder:
			holders++
			if r.Key != key || keys == 0 {
				keys++
			}
			key = r.Key
		}
	})
	return fmt.Sprintf("%d keys held by %d holders, %d sessions, last fencing token %d", keys, holders, sessions, last)
}

type snapshotRestoreOptions struct {
	DataPath string
	RaftDir  string
	Peers    string
}

func newSnapshotRestoreCommand() *cobra.Command {
	opts := &snapshotRestoreOptions{}
	cmd := &cobra.Command{
		Use:   "restore FILE (--data-path PATH | --raft-dir DIR --raft-peers PEERS)",
		Short: "Write a data path or a raft directory from a snapshot file, for an lcd that is stopped",
		Long: `snapshot restore checks FILE (every record's CRC32C and the end record's
count and CRC32C) and writes what an lcd starts from, offline:

  --data-path PATH   a write-ahead log at PATH, the file of DATA_PATH: the
                     log a compaction to that table writes. PATH must not
                     exist or be empty, and no lcd may have it open.
  --raft-dir DIR     the RAFT_DIR of one node of a new cluster of
                     --raft-peers (RAFT_PEERS' form, id=raft=client,...):
                     a raft snapshot of the table and that configuration,
                     no log. DIR must not exist or be empty. Run it with
                     the same FILE and peers for every node, then start
                     them all (docs/ha.md).

lcd, started there, serves the table of the snapshot, and every fencing
token it grants is above every token in it. It prints one line. A file
that is not a whole snapshot, or a data path or directory that is not
empty, exits 2 with one line, having written nothing.`,
		Args: oneFile("snapshot restore"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (opts.DataPath == "") == (opts.RaftDir == "") {
				return usagef("snapshot restore takes one of --data-path and --raft-dir (see lc-cli snapshot restore --help)")
			}
			if (opts.RaftDir == "") != (opts.Peers == "") {
				return usagef("snapshot restore: --raft-peers goes with --raft-dir, and --raft-dir needs it")
			}
			line, err := restoreSnapshot(args[0], opts)
			if err != nil {
				return failure(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.DataPath, "data-path", "", "the DATA_PATH file to write; must not exist or be empty")
	cmd.Flags().StringVar(&opts.RaftDir, "raft-dir", "", "the RAFT_DIR of a node of a new cluster to write; must not exist or be empty")
	cmd.Flags().StringVar(&opts.Peers, "raft-peers", "", "the nodes of the new cluster, id=raftaddress=clientaddress,... as RAFT_PEERS")
	return cmd
}

// restoreSnapshot reads the snapshot file at path and writes the data path
// or raft directory of opts from it.
func restoreSnapshot(path string, opts *snapshotRestoreOptions) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	t, _, err := store.ReadSnapshotFile(in)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if opts.DataPath != "" {
		if err := store.Restore(opts.DataPath, t); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: %s, restored from %s", opts.DataPath, describeTable(t), path), nil
	}
	peers, err := cluster.ParsePeers(opts.Peers)
	if err != nil {
		return "", usagef("--raft-peers: %v", err)
	}
	index, err := cluster.Restore(opts.RaftDir, peers, t)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: %s, restored from %s as the snapshot at position %d of a cluster of %d nodes",
		opts.RaftDir, describeTable(t), path, index, len(peers)), nil
}
