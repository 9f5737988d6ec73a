package mutex

import "unique"

// An account is who the table charges for a lock or a parked request, so
// that a cap on what one client may hold or have waiting can be checked
// where the lock is decided. The front end names it (Command.Account): the
// authenticated principal, or without authentication the client's IP
// address. A session is charged to the account it was opened with; a v1
// request to the account of its command. The empty account is never
// counted and never capped.

// usage is what one account holds and has waiting.
type usage struct {
	held, parked uint32
}

// noAccount is the handle of the empty account.
var noAccount = unique.Make("")

// AccountUsage is what one account holds and has parked.
type AccountUsage struct {
	Account string
	Held    int // locks held (a reentrant lock counts once)
	Parked  int // requests waiting in a queue
}

// usageOf returns the usage of a, creating it.
func (t *Table) usageOf(a unique.Handle[string]) *usage {
	u := t.accounts[a]
	if u == nil {
		u = &usage{}
		t.accounts[a] = u
	}
	return u
}

// charge adds dHeld and dParked to a's usage, forgetting an account that
// is left with nothing.
func (t *Table) charge(a unique.Handle[string], dHeld, dParked int) {
	if a == noAccount || a == (unique.Handle[string]{}) {
		return
	}
	u := t.usageOf(a)
	u.held = uint32(int(u.held) + dHeld)
	u.parked = uint32(int(u.parked) + dParked)
	if u.held == 0 && u.parked == 0 {
		delete(t.accounts, a)
	}
}

// overLimit reports whether an acquire of c charged to a must be refused
// before it takes a lock or a place in a queue: the account's locks and
// parked requests, each of which may become a lock, are already c.MaxHeld.
func (t *Table) overLimit(a unique.Handle[string], c *Command) bool {
	if c.MaxHeld == 0 || a == noAccount {
		return false
	}
	u := t.accounts[a]
	return u != nil && u.held+u.parked >= c.MaxHeld
}

// overParked reports whether a's parked requests, counting one just
// queued, are above c.MaxParked.
func (t *Table) overParked(a unique.Handle[string], c *Command) bool {
	if c.MaxParked == 0 || a == noAccount {
		return false
	}
	u := t.accounts[a]
	return u != nil && u.parked > c.MaxParked
}

// enqueue parks r at the tail of e's queue, charged to its account.
func (t *Table) enqueue(e *entry, r *request) {
	e.enqueue(r)
	t.charge(r.account(), 0, 1)
}

// unlink takes r out of its key's queue and its account's charge.
func (t *Table) unlink(r *request) {
	r.e.unlink(r)
	t.charge(r.account(), 0, -1)
}

// Usage returns what account holds and has parked.
func (t *Table) Usage(account string) AccountUsage {
	out := AccountUsage{Account: account}
	if u := t.accounts[unique.Make(account)]; u != nil {
		out.Held, out.Parked = int(u.held), int(u.parked)
	}
	return out
}
