package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

// ErrNoLog: a directory given to OpenLog holds neither log store's files.
var ErrNoLog = errors.New("cluster: the directory holds no raft log")

// LogReader reads the raft log of a node that is stopped, from its
// Config.Dir, with either LogStore, and writes nothing there: BoltDB's
// file is opened read-only; of the WAL, the list of segments is read from
// its BoltDB file, opened read-only, and the segments as files. Its
// entries are those the store would give raft: the WAL's from the
// segments its list names, each within the range the list gives it, and
// of a segment's entries only the batches whose commit was written.
type LogReader struct {
	first, last uint64
	entry       func(index uint64) (*raft.Log, error)
	close       func() error
}

// OpenLog opens the raft log in dir, a node's Config.Dir, whichever store
// keeps it there. The node must be stopped and stay stopped until Close: a
// directory that a process has open is refused with ErrLocked. Errors:
// ErrNoLog, ErrOtherLogStore (dir holds both stores' files), ErrLocked,
// or the error of a file.
func OpenLog(dir string) (*LogReader, error) {
	var found []LogStore
	for _, ls := range []LogStore{LogStoreBoltDB, LogStoreWAL} {
		switch _, err := os.Stat(ls.marker(dir)); {
		case err == nil:
			found = append(found, ls)
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%w: %s", ErrNoLog, dir)
	case 2:
		return nil, fmt.Errorf("%w: %s holds both %s and %s", ErrOtherLogStore, dir,
			LogStoreBoltDB.markerName(), LogStoreWAL.markerName())
	}
	if found[0] == LogStoreWAL {
		return openWALReader(filepath.Join(dir, walDir))
	}
	return openBoltReader(filepath.Join(dir, boltFile))
}

// FirstIndex is the position of the log's first entry, 0 when it has none.
// A snapshot may have let the entries before it go.
func (r *LogReader) FirstIndex() uint64 { return r.first }

// LastIndex is the position of the log's last entry, 0 when it has none.
func (r *LogReader) LastIndex() uint64 { return r.last }

// Entry returns the entry at index. Errors: raft.ErrLogNotFound for an
// index the log does not hold, or the error of a file.
func (r *LogReader) Entry(index uint64) (*raft.Log, error) {
	if index < r.first || index > r.last || r.last == 0 {
		return nil, raft.ErrLogNotFound
	}
	return r.entry(index)
}

// Close closes the files. It is safe to call more than once.
func (r *LogReader) Close() error {
	if r.close == nil {
		return nil
	}
	err := r.close()
	r.close = nil
	return err
}

// openBoltReader opens raft.db at path read-only.
func openBoltReader(path string) (*LogReader, error) {
	bs, err := raftboltdb.New(raftboltdb.Options{Path: path,
		BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: boltOpenTimeout}})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, filepath.Dir(path))
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: open %s: %w", path, err)
	}
	r := &LogReader{close: bs.Close, entry: func(index uint64) (*raft.Log, error) {
		var l raft.Log
		if err := bs.GetLog(index, &l); err != nil {
			return nil, err
		}
		return &l, nil
	}}
	if r.first, err = bs.FirstIndex(); err == nil {
		r.last, err = bs.LastIndex()
	}
	if err != nil {
		bs.Close()
		return nil, fmt.Errorf("cluster: read %s: %w", path, err)
	}
	return r, nil
}

// walSegment is one segment of the list in the WAL's BoltDB file: the
// range of entries it holds, and either a reader of its file (a sealed
// segment with an index block) or the entries read through it.
type walSegment struct {
	min, max uint64
	reader   types.SegmentReader
	entries  map[uint64][]byte
}

// openWALReader opens the WAL in dir for reading only.
func openWALReader(dir string) (*LogReader, error) {
	state, err := readWALState(dir)
	if err != nil {
		return nil, err
	}
	filer := segment.NewFiler(dir, fs.New())
	var segs []*walSegment
	closeAll := func() error {
		var errs []error
		for _, s := range segs {
			if s.reader != nil {
				errs = append(errs, s.reader.Close())
			}
		}
		return errors.Join(errs...)
	}
	for _, si := range state.Segments {
		if si.Codec != wal.CodecBinaryV1 {
			closeAll()
			return nil, fmt.Errorf("cluster: %s: segment %s has codec %d", dir, segment.FileName(si), si.Codec)
		}
		s, err := openWALSegment(filer, si)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("cluster: %s: segment %s: %w", dir, segment.FileName(si), err)
		}
		segs = append(segs, s)
	}
	r := &LogReader{close: closeAll, entry: func(index uint64) (*raft.Log, error) {
		i := slices.IndexFunc(segs, func(s *walSegment) bool { return s.min <= index && index <= s.max })
		if i < 0 {
			return nil, raft.ErrLogNotFound
		}
		return segs[i].entry(index)
	}}
	for _, s := range segs {
		if s.max < s.min {
			continue // an empty tail
		}
		if r.first == 0 {
			r.first = s.min
		}
		r.last = s.max
	}
	return r, nil
}

// readWALState reads the list of segments from the WAL's BoltDB file,
// opened read-only: raft-wal's metadb would open it for writing.
func readWALState(dir string) (types.PersistentState, error) {
	var state types.PersistentState
	path := filepath.Join(dir, metadb.FileName)
	db, err := bbolt.Open(path, 0, &bbolt.Options{ReadOnly: true, Timeout: boltOpenTimeout})
	if errors.Is(err, bbolt.ErrTimeout) {
		return state, fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	if err != nil {
		return state, fmt.Errorf("cluster: open %s: %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(metadb.MetaBucket))
		if b == nil {
			return nil // no segment was ever listed
		}
		if raw := b.Get([]byte(metadb.MetaKey)); raw != nil {
			return json.Unmarshal(raw, &state)
		}
		return nil
	})
	if err != nil {
		return state, fmt.Errorf("cluster: read %s: %w", path, err)
	}
	return state, nil
}

// openWALSegment opens the segment si. A sealed segment with an index
// block is read through its index; any other (the tail, and a segment
// that a truncation of the log's tail sealed: raft-wal v0.4.0 writes no
// index block for it) is read through once, up to its last commit.
func openWALSegment(filer *segment.Filer, si types.SegmentInfo) (*walSegment, error) {
	s := &walSegment{min: si.MinIndex, max: si.MaxIndex}
	if !si.SealTime.IsZero() && si.IndexStart != 0 {
		r, err := filer.Open(si)
		if err != nil {
			return nil, err
		}
		s.reader = r
		return s, nil
	}
	var before uint64 // exclusive; 0 for no bound
	if !si.SealTime.IsZero() {
		before = si.MaxIndex + 1
	}
	s.entries = map[uint64][]byte{}
	s.max = si.MinIndex - 1
	err := filer.DumpSegment(si.BaseIndex, si.ID, si.MinIndex-1, before, func(_ types.SegmentInfo, e types.LogEntry) (bool, error) {
		s.entries[e.Index] = slices.Clone(e.Data)
		s.max = max(s.max, e.Index)
		return true, nil
	})
	if errors.Is(err, os.ErrNotExist) && si.SealTime.IsZero() {
		return s, nil // listed before its file was made, as after a crash: empty
	}
	return s, err
}

// entry decodes the entry at index, which is within the segment's range.
func (s *walSegment) entry(index uint64) (*raft.Log, error) {
	var raw []byte
	if s.reader != nil {
		buf, err := s.reader.GetLog(index)
		if err != nil {
			return nil, err
		}
		raw = slices.Clone(buf.Bs)
		buf.Close()
	} else if raw = s.entries[index]; raw == nil {
		return nil, raft.ErrLogNotFound
	}
	var l raft.Log
	if err := (&wal.BinaryCodec{}).Decode(raw, &l); err != nil {
		return nil, fmt.Errorf("decode entry %d: %w", index, err)
	}
	return &l, nil
}
