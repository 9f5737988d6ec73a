package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/locking-center/locking-center/store"
	"go.etcd.io/bbolt"
)

// LogStore names the store that keeps a node's raft log and stable store
// (its term and vote) in Config.Dir. A directory keeps the store it was
// first opened with; the snapshots are raft's files in either case.
type LogStore string

const (
	// LogStoreBoltDB keeps the log and stable store in one BoltDB file,
	// raft.db (raft-boltdb). Each append is a BoltDB transaction, which
	// syncs the file twice (the pages, then the meta page).
	LogStoreBoltDB LogStore = "boltdb"
	// LogStoreWAL keeps the log in segment files under wal/ (raft-wal),
	// appended to and synced once per batch of entries; the stable store
	// and the list of segments sit in a small BoltDB file beside them,
	// written at a vote or a new term, when a segment is sealed, and when
	// the log's oldest entries go after a snapshot.
	LogStoreWAL LogStore = "wal"
)

// DefaultLogStore is the log store of a Config that names none.
const DefaultLogStore = LogStoreBoltDB

// ErrOtherLogStore: Config.Dir holds the files of another log store than
// the one configured.
var ErrOtherLogStore = errors.New("cluster: the raft directory holds another log store")

// Files in Config.Dir.
const (
	boltFile     = "raft.db"     // LogStoreBoltDB
	walDir       = "wal"         // LogStoreWAL: the segments and walMetaFile
	walMetaFile  = "wal-meta.db" // raft-wal's own name, in walDir
	walLockFile  = "lock"        // in walDir: one process at a time
	snapshotsDir = "snapshots"   // raft's file snapshots, with either store
)

// boltOpenTimeout bounds the wait for raft.db's file lock (a variable
// for tests).
var boltOpenTimeout = time.Second

// ParseLogStore parses RAFT_LOG_STORE; "" is DefaultLogStore. Errors: a
// name that is none of the stores.
func ParseLogStore(s string) (LogStore, error) {
	switch ls := LogStore(s); ls {
	case "":
		return DefaultLogStore, nil
	case LogStoreBoltDB, LogStoreWAL:
		return ls, nil
	}
	return "", fmt.Errorf("cluster: log store %q: want %s or %s", s, LogStoreBoltDB, LogStoreWAL)
}

// logStore is raft's log and stable store over Config.Dir.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// marker returns the file whose presence in dir shows that the store ls
// has state there.
func (ls LogStore) marker(dir string) string { return filepath.Join(dir, ls.markerName()) }

// markerName is marker's path in the directory.
func (ls LogStore) markerName() string {
	if ls == LogStoreWAL {
		return filepath.Join(walDir, walMetaFile)
	}
	return boltFile
}

// openLogStore opens the log store ls in dir, refusing a dir that holds
// the other store's files. When dir held no state of ls, discard removes
// the files this open created (call it before Close, while the store
// still holds its lock); otherwise discard is nil. Errors:
// ErrOtherLogStore, ErrLocked, or the error of a file.
func openLogStore(ls LogStore, dir string, hl hclog.Logger) (s logStore, discard func() error, err error) {
	other := LogStoreWAL
	if ls == LogStoreWAL {
		other = LogStoreBoltDB
	}
	switch _, err := os.Stat(other.marker(dir)); {
	case err == nil:
		return nil, nil, fmt.Errorf("%w: %s holds the %s store's %s, not the %s store configured; a change of store needs an empty directory",
			ErrOtherLogStore, dir, other, other.markerName(), ls)
	case !errors.Is(err, os.ErrNotExist):
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	_, err = os.Stat(ls.marker(dir))
	fresh := errors.Is(err, os.ErrNotExist)
	if ls == LogStoreWAL {
		s, discard, err = openWAL(filepath.Join(dir, walDir), hl, fresh)
	} else {
		s, discard, err = openBolt(filepath.Join(dir, boltFile), fresh)
	}
	if err != nil {
		return nil, nil, err
	}
	if discard != nil && !holdsNothing(s) {
		discard = nil // another process made the store between the look and the lock
	}
	return s, discard, nil
}

// holdsNothing reports whether s holds no log entry and no term, as a
// store just created does.
func holdsNothing(s logStore) bool {
	first, err := s.FirstIndex()
	if err != nil || first != 0 {
		return false
	}
	last, err := s.LastIndex()
	if err != nil || last != 0 {
		return false
	}
	term, err := s.GetUint64([]byte("CurrentTerm")) // raft's key
	return err != nil || term == 0
}

// openBolt opens the BoltDB store at path. With fresh (path does not
// exist), discard removes it again.
func openBolt(path string, fresh bool) (s logStore, discard func() error, err error) {
	bs, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: boltOpenTimeout}})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, nil, fmt.Errorf("%w: %s", ErrLocked, filepath.Dir(path))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: open %s: %w", path, err)
	}
	if fresh {
		discard = func() error { return os.Remove(path) }
	}
	return bs, discard, nil
}

// walStore is raft-wal's WAL with the lock that keeps its directory to
// this process (raft-wal would wait for its BoltDB file's lock for ever),
// and that BoltDB file's store, which the WAL's Close leaves open in
// raft-wal v0.4.0.
type walStore struct {
	*wal.WAL
	meta      *metadb.BoltMetaDB
	unlock    func() error
	closeOnce sync.Once
	closeErr  error
}

// openWAL opens the WAL in dir. With fresh (dir holds no WAL), discard
// removes what the open created in dir: the entries that were not there
// before, and dir when it was not.
func openWAL(dir string, hl hclog.Logger, fresh bool) (s logStore, discard func() error, err error) {
	before, err := os.ReadDir(dir)
	existed := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	unlock, err := store.LockFile(filepath.Join(dir, walLockFile))
	if errors.Is(err, store.ErrLocked) {
		return nil, nil, fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	if fresh {
		discard = func() error {
			had := map[string]bool{}
			for _, e := range before {
				had[e.Name()] = true
			}
			now, err := os.ReadDir(dir)
			if err != nil {
				return err
			}
			var errs []error
			for _, e := range now {
				if !had[e.Name()] {
					errs = append(errs, os.Remove(filepath.Join(dir, e.Name())))
				}
			}
			if !existed {
				errs = append(errs, os.Remove(dir))
			}
			return errors.Join(errs...)
		}
	}
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithLogger(hl.Named("wal")), wal.WithMetaStore(meta))
	if err != nil {
		meta.Close()
		if discard != nil {
			discard()
		}
		unlock()
		return nil, nil, fmt.Errorf("cluster: open %s: %w", dir, err)
	}
	return &walStore{WAL: w, meta: meta, unlock: unlock}, discard, nil
}

// Close closes the WAL and its BoltDB file, then releases its directory.
// It is safe to call more than once.
func (s *walStore) Close() error {
	s.closeOnce.Do(func() { s.closeErr = errors.Join(s.WAL.Close(), s.meta.Close(), s.unlock()) })
	return s.closeErr
}
