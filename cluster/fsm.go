package cluster

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/store"
)

// fsm is raft's state machine: it applies each committed command to the
// node, in log order, and keeps the members' client addresses.
type fsm struct {
	node *mutex.Node
	log  *slog.Logger

	// mu is held while an entry applies, so that a reader that holds it
	// sees the table and applied of one position.
	mu      sync.Mutex
	applied atomic.Uint64 // position of the last entry applied or restored
	next    chan struct{} // closed when the next entry applies; nil: nobody waits

	mmu     sync.Mutex
	members map[string]Peer // recorded in the log, by node id
	seeded  map[string]Peer // from the configuration, for those the log has none of

	// failed, once an entry did not decode: the node applies nothing
	// more, takes no snapshot, and fatal (set before raft starts) is told.
	failed error
	fatal  func(error)
}

func newFSM(n *mutex.Node, log *slog.Logger) *fsm {
	return &fsm{node: n, log: log, members: map[string]Peer{}, seeded: map[string]Peer{}}
}

// Apply applies one committed entry. Its time travels in the command: it
// reads no clock. A leader proposes only entries it encoded, so an entry
// that does not decode means this node's copy of the log is damaged (or
// written by a newer lcd): applying on past it would leave this node's
// table unlike the others', and a leader of such a table could grant a
// key that another session holds. The node stops instead: it applies
// nothing more and tells fatal.
func (f *fsm) Apply(l *raft.Log) any {
	e, err := decodeEntry(l.Data)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.failed != nil:
		return nil
	case err != nil:
		f.failed = fmt.Errorf("raft log entry %d does not decode (the log of this node is damaged): %w", l.Index, err)
		f.log.Error("a raft log entry does not decode: this node applies nothing more and stops", slog.Uint64(logIndex, l.Index),
			slog.Any(logError, err))
		if f.fatal != nil {
			f.fatal(f.failed)
		}
		return nil
	case e.kind == entryMember:
		f.mmu.Lock()
		f.members[e.member.ID] = e.member
		f.mmu.Unlock()
	case e.kind == entryForget:
		f.mmu.Lock()
		delete(f.members, e.member.ID)
		delete(f.seeded, e.member.ID)
		f.mmu.Unlock()
	case e.kind == entryBatch:
		f.node.ApplyCommittedBatch(e.cmds, l.Index)
	default:
		f.node.ApplyCommitted(&e.cmd, l.Index)
	}
	f.applied.Store(l.Index)
	if f.next != nil {
		close(f.next)
		f.next = nil
	}
	return nil
}

// changed returns a channel closed when the next entry applies.
func (f *fsm) changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == nil {
		f.next = make(chan struct{})
	}
	return f.next
}

// member returns the peer of id as the log records it, or else as the
// configuration does.
func (f *fsm) member(id string) (Peer, bool) {
	f.mmu.Lock()
	defer f.mmu.Unlock()
	if p, ok := f.members[id]; ok {
		return p, true
	}
	p, ok := f.seeded[id]
	return p, ok
}

// logged returns the peer of id as the log records it.
func (f *fsm) logged(id string) (Peer, bool) {
	f.mmu.Lock()
	defer f.mmu.Unlock()
	p, ok := f.members[id]
	return p, ok
}

// memberList returns the peers the log records, by id; with seeded, also
// those only the configuration names.
func (f *fsm) memberList(seeded bool) []Peer {
	f.mmu.Lock()
	defer f.mmu.Unlock()
	out := make([]Peer, 0, len(f.members))
	for _, p := range f.members {
		out = append(out, p)
	}
	for id, p := range f.seeded {
		if _, ok := f.members[id]; seeded && !ok {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Peer) int { return cmpString(a.ID, b.ID) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Snapshot copies the table and the members; Persist writes the copy
// while entries go on applying.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	failed := f.failed
	f.mu.Unlock()
	if failed != nil {
		return nil, failed // the table is not the log's
	}
	h := snapshotHeader{Format: snapshotFormat, Index: f.applied.Load()}
	for _, p := range f.memberList(false) {
		h.Members = append(h.Members, p.toJSON())
	}
	return &snapshot{header: h, table: f.node.Clone()}, nil
}

// Restore puts the snapshot's table in place of the node's and its
// members in place of the recorded ones.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	h, t, err := readSnapshot(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node.Replace(t)
	f.mmu.Lock()
	clear(f.members)
	for _, m := range h.Members {
		f.members[m.ID] = m.peer()
	}
	f.mmu.Unlock()
	f.applied.Store(h.Index)
	f.log.Info("restored a snapshot", slog.Uint64(logIndex, h.Index), slog.Int(logKeys, t.Len()))
	return nil
}

// readSnapshot reads a whole snapshot stream. Errors: store.ErrBadSnapshot,
// wrapping the reason, or r's.
func readSnapshot(r io.Reader) (snapshotHeader, *mutex.Table, error) {
	h, err := readHeader(r)
	if err != nil {
		return snapshotHeader{}, nil, err
	}
	cr := &countReader{r: io.LimitReader(r, h.Bytes)}
	t, err := store.ReadSnapshot(cr)
	if err != nil {
		return snapshotHeader{}, nil, err
	}
	if cr.n != h.Bytes {
		return snapshotHeader{}, nil, fmt.Errorf("%w: %d bytes of records, want %d", store.ErrBadSnapshot, cr.n, h.Bytes)
	}
	return h, t, nil
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// countWriter counts the bytes written to it and drops them.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// snapshot is a copy of the state at one position, for Persist.
type snapshot struct {
	header snapshotHeader
	table  *mutex.Table
}

// Persist writes the header and the table's snapshot records to sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(sink, &s.header, s.table); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// writeSnapshot writes h, with the size of t's records, and the records.
func writeSnapshot(w io.Writer, h *snapshotHeader, t *mutex.Table) error {
	var size countWriter
	store.WriteSnapshot(&size, t)
	h.Bytes = size.n
	if err := writeHeader(w, h); err != nil {
		return err
	}
	_, err := store.WriteSnapshot(w, t)
	return err
}

func (s *snapshot) Release() {}
