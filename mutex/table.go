package mutex

import (
	"context"
	"sync"
	"time"
	"unique"
)

// Grant describes one holder of a key: who asked, from where, and when the
// key was granted. Acquired carries a monotonic reading when the grant was
// made by this process, so Held never goes negative when the wall clock
// steps; a grant restored from a journal has only the wall clock.
type Grant struct {
	ID         uint64    // request id, unique within one table
	Key        string    // 1..MaxKeyLen bytes, opaque
	Source     string    // owner as the client named it, or its peer IP
	RemoteAddr string    // ip:port of the connection that won the key
	Acquired   time.Time // when the key was granted
}

// Held returns how long g has been held at now, never less than zero.
func (g Grant) Held(now time.Time) time.Duration {
	d := now.Sub(g.Acquired)
	if d < 0 {
		return 0
	}
	return d
}

// Config configures a Table. The zero value is usable.
type Config struct {
	// Journal receives every grant and release. Nil records nothing.
	Journal Journal
	// Now is the clock; nil means time.Now. Tests inject their own.
	Now func() time.Time
}

// Table is the lock table: at most one holder per key and a FIFO queue of
// parked requests behind it. It is safe for concurrent use; no method
// blocks while holding the table's lock.
type Table struct {
	mu      sync.Mutex
	keys    map[string]*entry
	parked  map[uint64]*Ticket // cancellation registry: parked requests by id
	nextID  uint64
	journal Journal
	now     func() time.Time
	epoch   time.Time // grant times are kept as offsets from it
	stats   stats
	woken   []*Ticket // tickets whose wake is due once mu is released
}

// entry is one key with a holder, waiters, or both. A held key with no
// waiters needs nothing beyond this struct: 48 bytes on 64-bit platforms,
// plus its key and remote address.
type entry struct {
	holder holder
	queue  *queue
}

// holder is the compact form of a Grant kept in the table. The key is the
// table's map key; the source is interned, since one source usually holds
// many keys; the grant time is an offset from the table's epoch, which
// carries the monotonic clock.
type holder struct {
	id       uint64 // 0 when no one holds the key
	source   unique.Handle[string]
	remote   string
	acquired time.Duration // since Table.epoch
}

type queue struct {
	head, tail *Ticket
	n          int
}

type ticketState uint8

const (
	ticketQueued ticketState = iota
	ticketGranted
	ticketWithdrawn
)

// Ticket is a lock request that has entered the table: granted at once, or
// parked until it is granted or withdrawn. All fields are guarded by the
// table's lock.
type Ticket struct {
	grant    Grant
	queuedAt time.Time
	state    ticketState
	err      error   // reason for withdrawal
	pending  Pending // the journal's promise for the grant
	done     chan struct{}
	wake     func(*Ticket)
	prev     *Ticket
	next     *Ticket
}

// NewTable returns an empty table.
func NewTable(cfg Config) *Table {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Table{
		keys:    make(map[string]*entry),
		parked:  make(map[uint64]*Ticket),
		journal: cfg.Journal,
		now:     now,
		epoch:   now(),
		stats:   stats{Wait: newHistogram()},
	}
}

// Claim names the requester of a lock: the key, its source and the remote
// address of its connection.
type Claim struct {
	Key        string
	Source     string
	RemoteAddr string
}

// Restore installs grants read back from a journal, before the table serves.
// The grants keep their source, remote address and acquired time; they get
// fresh ids. Nothing is appended to the journal. A key given twice keeps
// the last grant.
func (t *Table) Restore(grants []Grant) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, g := range grants {
		t.nextID++
		g.ID = t.nextID
		e := t.keys[g.Key]
		if e == nil {
			e = &entry{}
			t.keys[g.Key] = e
		}
		e.holder = holder{id: g.ID, source: unique.Make(g.Source), remote: g.RemoteAddr, acquired: g.Acquired.Sub(t.epoch)}
	}
}

// grant expands the holder of key into a Grant.
func (t *Table) grant(key string, h holder) Grant {
	return Grant{ID: h.id, Key: key, Source: h.source.Value(), RemoteAddr: h.remote, Acquired: t.epoch.Add(h.acquired)}
}

// TryLock grants c.Key if it is free and otherwise returns ErrBusy at once.
// The returned Pending reports when the grant is durable; if it fails, the
// caller must call ReleaseGrant.
func (t *Table) TryLock(c Claim) (Grant, Pending, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.keys[c.Key]
	if e != nil && (e.holder.id != 0 || e.queue != nil) {
		t.stats.Busy++
		return Grant{}, nil, ErrBusy
	}
	if e == nil {
		e = &entry{}
		t.keys[c.Key] = e
	}
	now := t.now()
	g := t.grantLocked(e, c, now, 0, 0)
	return g, t.appendLocked(OpGrant, g), nil
}

// Enqueue asks for c.Key. When the key is free the ticket is granted at
// once; otherwise it parks at the tail of the key's queue. When a parked
// ticket is granted or withdrawn, Done reports it and wake, if not nil, is
// called with the ticket once, by the goroutine whose call did it, after
// the table's lock is released; wake may call the table but should not
// block for long, as that call waits for it.
func (t *Table) Enqueue(c Claim, wake func(*Ticket)) *Ticket {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	tk := &Ticket{queuedAt: now, wake: wake}
	e := t.keys[c.Key]
	if e == nil {
		e = &entry{}
		t.keys[c.Key] = e
	}
	if e.holder.id == 0 && e.queue == nil {
		tk.grant = t.grantLocked(e, c, now, 0, 0)
		tk.state = ticketGranted
		tk.pending = t.appendLocked(OpGrant, tk.grant)
		return tk
	}
	t.nextID++
	tk.grant = Grant{ID: t.nextID, Key: c.Key, Source: c.Source, RemoteAddr: c.RemoteAddr}
	tk.done = make(chan struct{}, 1)
	q := e.queue
	if q == nil {
		q = &queue{}
		e.queue = q
	}
	if q.tail == nil {
		q.head = tk
	} else {
		q.tail.next, tk.prev = tk, q.tail
	}
	q.tail = tk
	q.n++
	t.parked[tk.grant.ID] = tk
	t.stats.Parked++
	return tk
}

// grantLocked makes c the holder of e at now, after a wait of waited.
// id 0 draws a fresh id.
func (t *Table) grantLocked(e *entry, c Claim, now time.Time, id uint64, waited time.Duration) Grant {
	if id == 0 {
		t.nextID++
		id = t.nextID
	}
	e.holder = holder{id: id, source: unique.Make(c.Source), remote: c.RemoteAddr, acquired: now.Sub(t.epoch)}
	t.stats.Grants++
	t.stats.Wait.observe(waited)
	return Grant{ID: id, Key: c.Key, Source: c.Source, RemoteAddr: c.RemoteAddr, Acquired: t.epoch.Add(e.holder.acquired)}
}

func (t *Table) appendLocked(op Op, g Grant) Pending {
	if t.journal == nil {
		return nil
	}
	return t.journal.Append(Change{Op: op, Grant: g})
}

// Done is closed-like: it receives once when a parked ticket is granted or
// withdrawn. It is nil for a ticket granted at once.
func (tk *Ticket) Done() <-chan struct{} { return tk.done }

// ID returns the request id of the ticket.
func (tk *Ticket) ID() uint64 { return tk.grant.ID }

// Result reports the ticket's state: the grant and its journal Pending when
// granted, ErrWithdrawn (wrapped with the reason) when withdrawn, and
// ErrParked while still parked.
func (t *Table) Result(tk *Ticket) (Grant, Pending, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch tk.state {
	case ticketGranted:
		return tk.grant, tk.pending, nil
	case ticketWithdrawn:
		return Grant{}, nil, tk.err
	}
	return Grant{}, nil, ErrParked
}

// Withdraw takes back a ticket whose requester has gone. A parked ticket
// leaves its queue; a granted ticket whose grant is still in force is
// released, so the key passes to the next waiter. It reports whether the
// ticket had been granted, and returns the Pending of any release.
func (t *Table) Withdraw(tk *Ticket) (granted bool, p Pending) {
	t.mu.Lock()
	defer t.unlockAndWake()
	switch tk.state {
	case ticketQueued:
		t.withdrawLocked(tk, ErrWithdrawn)
		return false, nil
	case ticketGranted:
		return true, t.releaseIfLocked(tk.grant)
	}
	return false, nil
}

// withdrawLocked removes a parked ticket from its queue and the registry.
func (t *Table) withdrawLocked(tk *Ticket, reason error) {
	e := t.keys[tk.grant.Key]
	q := e.queue
	if tk.prev == nil {
		q.head = tk.next
	} else {
		tk.prev.next = tk.next
	}
	if tk.next == nil {
		q.tail = tk.prev
	} else {
		tk.next.prev = tk.prev
	}
	tk.prev, tk.next = nil, nil
	q.n--
	if q.n == 0 {
		e.queue = nil
	}
	delete(t.parked, tk.grant.ID)
	t.stats.Parked--
	t.stats.Withdrawn++
	tk.state, tk.err = ticketWithdrawn, reason
	t.signalLocked(tk)
	t.dropIfIdleLocked(tk.grant.Key, e)
}

func (t *Table) signalLocked(tk *Ticket) {
	tk.done <- struct{}{}
	if tk.wake != nil {
		t.woken = append(t.woken, tk)
	}
}

// unlockAndWake releases the table's lock, then calls the wake functions
// of the tickets granted or withdrawn while it was held, in that order.
func (t *Table) unlockAndWake() {
	woken := t.woken
	t.woken = nil
	t.mu.Unlock()
	for i, tk := range woken {
		tk.wake(tk)
		woken[i] = nil
	}
}

func (t *Table) dropIfIdleLocked(key string, e *entry) {
	if e.holder.id == 0 && e.queue == nil {
		delete(t.keys, key)
	}
}

// Release ends the current grant of key, whoever holds it, and passes the
// key to the first waiter. Releasing a free key changes nothing and returns
// nil. The Pending reports when the release is durable.
func (t *Table) Release(key string) Pending {
	_, p := t.Unlock(key)
	return p
}

// Unlock is Release, and also returns the request id of the grant it
// ended, or 0 when the key was free.
func (t *Table) Unlock(key string) (ended uint64, p Pending) {
	t.mu.Lock()
	defer t.unlockAndWake()
	e := t.keys[key]
	if e == nil || e.holder.id == 0 {
		return 0, nil
	}
	ended = e.holder.id
	return ended, t.releaseLocked(key, e)
}

// ReleaseGrant releases g only if it is still the key's grant in force; a
// grant that has already ended is left alone. It undoes a grant whose '+'
// could not be delivered or whose journal write failed.
func (t *Table) ReleaseGrant(g Grant) Pending {
	t.mu.Lock()
	defer t.unlockAndWake()
	return t.releaseIfLocked(g)
}

func (t *Table) releaseIfLocked(g Grant) Pending {
	e := t.keys[g.Key]
	if e == nil || e.holder.id != g.ID {
		return nil
	}
	return t.releaseLocked(g.Key, e)
}

// releaseLocked ends e's grant and hands the key to the head of its queue.
func (t *Table) releaseLocked(key string, e *entry) Pending {
	var p Pending
	if t.journal != nil {
		p = t.appendLocked(OpRelease, t.grant(key, e.holder))
	}
	e.holder = holder{}
	if q := e.queue; q != nil {
		tk := q.head
		q.head = tk.next
		if q.head == nil {
			q.tail = nil
		} else {
			q.head.prev = nil
		}
		tk.next = nil
		q.n--
		if q.n == 0 {
			e.queue = nil
		}
		delete(t.parked, tk.grant.ID)
		t.stats.Parked--
		now := t.now()
		claim := Claim{Key: key, Source: tk.grant.Source, RemoteAddr: tk.grant.RemoteAddr}
		tk.grant = t.grantLocked(e, claim, now, tk.grant.ID, now.Sub(tk.queuedAt))
		tk.state = ticketGranted
		tk.pending = t.appendLocked(OpGrant, tk.grant)
		t.signalLocked(tk)
		return p
	}
	delete(t.keys, key)
	return p
}

// ResetKey takes key from its holder, as Release does: the queue keeps its
// order and its head gets the key.
func (t *Table) ResetKey(key string) Pending { return t.Release(key) }

// ResetSource releases every key held by source (each passes to its next
// waiter) and withdraws every parked request of source with ErrWithdrawn.
// It returns the number of keys released and requests withdrawn, and the
// Pending of the last release.
func (t *Table) ResetSource(source string) (released, withdrawn int, p Pending) {
	t.mu.Lock()
	defer t.unlockAndWake()
	for _, tk := range t.parked {
		if tk.grant.Source == source {
			t.withdrawLocked(tk, ErrWithdrawn)
			withdrawn++
		}
	}
	src := unique.Make(source)
	for key, e := range t.keys {
		if e.holder.id != 0 && e.holder.source == src {
			if rp := t.releaseLocked(key, e); rp != nil {
				p = rp
			}
			released++
		}
	}
	return released, withdrawn, p
}

// Lock blocks until c.Key is granted and durable, or ctx ends. When ctx
// ends first the request is withdrawn (or, if the grant raced it, the key
// is released again) and ctx's error is returned. A failed journal write
// releases the key and returns an error wrapping ErrJournal.
func (t *Table) Lock(ctx context.Context, c Claim) (Grant, error) {
	tk := t.Enqueue(c, nil)
	if tk.done != nil {
		select {
		case <-tk.done:
		case <-ctx.Done():
			t.Withdraw(tk)
			return Grant{}, ctx.Err()
		}
	}
	g, p, err := t.Result(tk)
	if err != nil {
		return Grant{}, err
	}
	if err := waitPending(p); err != nil {
		t.ReleaseGrant(g)
		return Grant{}, err
	}
	return g, nil
}

// Len returns the number of keys in the table: held, or with waiters.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.keys)
}

// Holder returns the grant in force for key, if any.
func (t *Table) Holder(key string) (Grant, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.keys[key]; e != nil && e.holder.id != 0 {
		return t.grant(key, e.holder), true
	}
	return Grant{}, false
}
