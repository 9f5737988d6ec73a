package lockingcenter

import (
	"context"
	"fmt"
	"slices"
)

// Semaphore is a key of n places: up to n holders at once, across every
// session that uses it, the others waiting in the key's one queue, served
// in the order they asked (or by WithPriority). Each holder has a Lock of
// its own, with a fencing token of its own. One session may hold several
// places.
//
// Every user of the key must agree on n: while anyone holds or waits for
// the key, an acquire with another n (or a plain Session.Acquire, or a v1
// lock, both n = 1) is refused with a *LimitMismatchError, which names the
// key's n and matches ErrLimitMismatch. It is safe for concurrent use.
type Semaphore struct {
	s   *Session
	key string
	n   uint32
}

// NewSemaphore returns the semaphore of n places (below 1 counts as 1) on
// key (1 to 127 bytes; Acquire reports an invalid one) for session s.
func NewSemaphore(s *Session, key string, n uint32) *Semaphore {
	return &Semaphore{s: s, key: key, n: max(n, 1)}
}

// Key returns the semaphore's key.
func (m *Semaphore) Key() string { return m.key }

// Limit returns n, the number of places.
func (m *Semaphore) Limit() uint32 { return m.n }

// Acquire waits for a place and returns its Lock; Release gives the place
// back. It waits however long it takes, through reconnections, until ctx
// ends (the request then leaves the queue). Options as for
// Session.Acquire: WithWait or TryOnce bound the wait; WithLease,
// WithLockDelay, WithPriority, WithOwner. Shared, WithLimit and Reentrant
// are refused with ErrInvalidOption.
//
// Errors: those of Session.Acquire (ErrBusy, ErrTimeout, ctx's error,
// the session's end), a *LimitMismatchError, and ErrInvalidOption.
func (m *Semaphore) Acquire(ctx context.Context, opts ...AcquireOption) (*Lock, error) {
	var o acquireOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.shared || o.limit != 0 || o.reentrant {
		return nil, fmt.Errorf("acquire %q: %w: a semaphore's places are exclusive and counted by NewSemaphore",
			m.key, ErrInvalidOption)
	}
	return m.s.Acquire(ctx, m.key, append(slices.Clip(opts), WithLimit(m.n))...)
}

// TryAcquire takes a place if one is free now, and otherwise returns
// ErrBusy at once: Acquire with TryOnce.
func (m *Semaphore) TryAcquire(ctx context.Context, opts ...AcquireOption) (*Lock, error) {
	return m.Acquire(ctx, append(slices.Clip(opts), TryOnce())...)
}
