package mutex

import (
	"sync"
	"time"
)

// Journal receives every command that changed the table, in the order
// the table applied them, each with its At set. The write-ahead log
// implements it; applying the same commands to an empty table (or to the
// table of a snapshot taken before them) rebuilds the table.
//
// Append is called with the node's lock held: it must only queue the
// command (copying what it keeps) and must not wait for I/O. The Pending
// it returns reports when this command and every command appended before
// it are durable; nil means they already are. A front end answers a grant
// only after its Pending succeeded, and a release only after its Pending
// returned.
type Journal interface {
	Append(c *Command) Pending
}

// Pending is a command on its way to durable storage.
type Pending interface {
	// Done is closed once the command is durable or has failed.
	Done() <-chan struct{}
	// Wait blocks until Done and returns the failure, wrapped so that
	// errors.Is(err, ErrJournal) holds, or nil.
	Wait() error
}

// WaitPending waits for p; a nil Pending is already durable.
func WaitPending(p Pending) error {
	if p == nil {
		return nil
	}
	return p.Wait()
}

// Ready reports whether p is durable or failed already, without waiting.
func Ready(p Pending) bool {
	if p == nil {
		return true
	}
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// MemoryJournal applies every command it is given to a table of its own,
// as a write-ahead log's replay would: a replica of the node's table that
// tests compare with the original. It never fails and never blocks. It is
// safe for concurrent use.
type MemoryJournal struct {
	mu       sync.Mutex
	t        *Table
	commands uint64
}

// NewMemoryJournal returns a MemoryJournal with an empty table.
func NewMemoryJournal() *MemoryJournal { return &MemoryJournal{t: NewTable()} }

// Append applies c to the replica and returns nil: the command is
// "durable" at once.
func (j *MemoryJournal) Append(c *Command) Pending {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.t.Apply(c)
	j.t.TakeEvents()
	j.commands++
	return nil
}

// Held returns the replica's holders, sorted by key and token.
func (j *MemoryJournal) Held() []Holder {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.t.snapshot(time.Time{}).Holders
}

// Commands returns how many commands have been appended.
func (j *MemoryJournal) Commands() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.commands
}

// Export writes the replica's state, as Table.Export does.
func (j *MemoryJournal) Export(f func(*Record)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.t.Export(f)
}
