package mutex

import (
	"sort"
	"sync"
)

// Op says what a Change does to a key.
type Op uint8

// The changes the table reports.
const (
	OpGrant   Op = 1 // a holder took the key
	OpRelease Op = 2 // the holder lost the key (unlock, reset, undone grant)
)

// String returns "grant" or "release".
func (o Op) String() string {
	switch o {
	case OpGrant:
		return "grant"
	case OpRelease:
		return "release"
	}
	return "unknown"
}

// Change is one grant or release of a key. For OpRelease, Grant is the
// grant that ended.
type Change struct {
	Op    Op
	Grant Grant
}

// Journal receives every change of the table, in the order the table made
// them. The write-ahead log implements it; so does MemoryJournal.
//
// Append is called with the table's lock held: it must only queue the change
// and must not wait for I/O. The Pending it returns reports when this change
// and every change appended before it are durable; nil means they already
// are. The table answers a lock's '+' only after its grant's Pending
// succeeds, and an unlock's '+' only after its release's Pending returns.
type Journal interface {
	Append(c Change) Pending
}

// Pending is a change on its way to durable storage.
type Pending interface {
	// Wait blocks until the change is durable or has failed, and returns
	// the failure, wrapped so that errors.Is(err, ErrJournal) holds.
	Wait() error
}

// waitPending waits for p; a nil Pending is already durable.
func waitPending(p Pending) error {
	if p == nil {
		return nil
	}
	return p.Wait()
}

// MemoryJournal keeps the set of held keys in memory, as a write-ahead log
// would after replay. It never fails and never blocks. It is safe for
// concurrent use.
type MemoryJournal struct {
	mu      sync.Mutex
	held    map[string]Grant
	changes uint64
}

// NewMemoryJournal returns an empty MemoryJournal.
func NewMemoryJournal() *MemoryJournal {
	return &MemoryJournal{held: make(map[string]Grant)}
}

// Append records c and returns nil: the change is "durable" at once.
func (j *MemoryJournal) Append(c Change) Pending {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.changes++
	switch c.Op {
	case OpGrant:
		j.held[c.Grant.Key] = c.Grant
	case OpRelease:
		delete(j.held, c.Grant.Key)
	}
	return nil
}

// Held returns the grants that are in force, sorted by key.
func (j *MemoryJournal) Held() []Grant {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Grant, 0, len(j.held))
	for _, g := range j.held {
		out = append(out, g)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Key < out[b].Key })
	return out
}

// Changes returns how many changes have been appended.
func (j *MemoryJournal) Changes() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.changes
}
