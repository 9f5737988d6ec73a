package mutex

import (
	"cmp"
	"slices"
	"time"
	"unique"
)

// A parked request bound to a connection can outlive its client for a
// moment: the client gave up and closed, the end of its connection is
// queued on the socket, and the goroutine that watches the connection has
// not cancelled the request yet. A command that passed the key on in that
// moment would grant it to nobody: a fencing token spent, a grant and its
// revoke among the events, and the next waiter kept waiting until the
// grant is found undelivered.
//
// So a front end that can tell without waiting whether a parked request's
// client has left hands the node that probe (ApplyWatched). Before the
// node applies a command that may pass a key on (or, leading a cluster,
// proposes it), it asks the probes of the requests that the command would
// grant, and of those only, and withdraws each whose client has left with
// a cancel of its own, applied (journalled, replicated) before the
// command. The table never calls a probe; it says which requests it would
// serve next, and the cancels are commands like any other.

// goneAhead appends to to the tickets of the parked requests that c may
// grant and whose clients have left, in the order their cancels are to be
// applied, and returns it. With no probe registered it does nothing;
// otherwise it looks, on each key c may pass on (Table.freed), at the
// requests the key's queue would serve next (entry.ahead), and asks the
// probe of each that has one. n.mu is held.
func (n *Node) goneAhead(c *Command, to []uint64) []uint64 {
	if len(n.probes) == 0 {
		return to
	}
	now := c.unixNano()
	n.t.freed(c, func(e *entry) {
		from := len(to)
		e.ahead(now, func(r *request) bool {
			if n.t.withdraws(c, r) || slices.Contains(to, r.ticket) {
				return false
			}
			if gone := n.probes[r.ticket]; gone == nil || !gone() {
				return true
			}
			to = append(to, r.ticket)
			return false
		})
		// The last first: withdrawing a request behind the first of the
		// queue grants nothing; withdrawing the first, last, grants only
		// requests that were found still there.
		slices.Reverse(to[from:])
	})
	return to
}

// goneBefore returns the tickets goneAhead finds for the expiries of the
// sessions of due, then for c. n.mu is held.
func (n *Node) goneBefore(due []uint64, c *Command) []uint64 {
	var gone []uint64
	for _, id := range due {
		gone = n.goneAhead(&Command{Op: OpExpireSession, At: c.At, Session: id}, gone)
	}
	return n.goneAhead(c, gone)
}

// cancelOf returns the command that withdraws the parked v1 request of
// ticket at at.
func cancelOf(ticket uint64, at time.Time) *Command {
	return &Command{Op: OpCancel, At: at, Ticket: ticket}
}

// watch registers w, and gone unless nil, for the parked request of
// ticket. n.mu is held.
func (n *Node) watch(ticket uint64, w Waker, gone func() bool) {
	n.wakers[ticket] = w
	if gone != nil {
		n.probes[ticket] = gone
	}
}

// freed calls f with each key that has parked requests and that c may
// pass to them: a key whose holders c may end, whose parked requests c
// may withdraw, whose deadline c may apply (a tick), or whose queue an
// acquire serves again first (where priorities age). f may see a key
// twice. It changes nothing.
func (t *Table) freed(c *Command, f func(*entry)) {
	queued := func(e *entry) {
		if e != nil && e.x != nil && e.x.head != nil {
			f(e)
		}
	}
	switch c.Op {
	case OpAcquire:
		if e := t.keys[c.Key]; e != nil && e.x != nil && e.x.prioritized > 0 {
			f(e)
		}
	case OpRelease, OpRevoke, OpResetKey:
		queued(t.keys[c.Key])
	case OpCancel:
		if r := t.cancelled(c); r != nil {
			queued(r.e)
		}
	case OpResetSource:
		src := unique.Make(c.Source)
		for _, r := range t.parked {
			if r.source == src {
				queued(r.e)
			}
		}
		for _, e := range t.keys {
			if e.holderFrom(src, c) != nil {
				queued(e)
			}
		}
	case OpCloseSession, OpExpireSession:
		if s := t.sessions[c.Session]; s != nil {
			for h := s.heldHead; h != nil; h = h.snext {
				queued(h.e)
			}
			for r := s.parkedHead; r != nil; r = r.snext {
				queued(r.e)
			}
		}
	case OpTick:
		t.timers.due(c.unixNano(), func(tm *timer) {
			switch tm.kind {
			case timerLease:
				queued(tm.hold.e)
			case timerWait:
				queued(tm.req.e)
			case timerDelay:
				queued(tm.ent)
			}
		})
	}
}

// withdraws reports whether c, applied, takes r, a parked request, out of
// its queue without the key: a cancel of r, a reset of its source, the
// end of its session, a tick at its wait's end. It changes nothing.
func (t *Table) withdraws(c *Command, r *request) bool {
	switch c.Op {
	case OpCancel:
		return r == t.cancelled(c)
	case OpResetSource:
		return r.source.Value() == c.Source
	case OpCloseSession, OpExpireSession:
		return r.sess != nil && r.sess.id == c.Session
	case OpTick:
		w := r.wait()
		return w != nil && w.at <= c.unixNano()
	}
	return false
}

// ahead calls stays on the parked requests of e in the order its queue
// serves them at now, as if e had no holders and no lock-delay, for as
// long as they would be granted together: a request that stays (stays
// reports true) counts as granted, one that does not as gone by then, and
// ahead stops before the first that would not fit beside those counted.
// A command on e grants no request that ahead does not reach. It changes
// nothing.
func (e *entry) ahead(now int64, stays func(*request) bool) {
	n, held := 0, Exclusive
	next := func(r *request) bool {
		if !fits(n, held, r.mode, r.limit()) {
			return false
		}
		if stays(r) {
			n, held = n+1, r.mode
		}
		return true
	}
	x := e.x
	if x.prioritized == 0 {
		for r := x.head; r != nil && next(r); r = r.next {
		}
		return
	}
	// The order of entry.best: by priority after aging, the earliest
	// among equals.
	queue := make([]*request, 0, x.queued)
	for r := x.head; r != nil; r = r.next {
		queue = append(queue, r)
	}
	slices.SortStableFunc(queue, func(a, b *request) int { return cmp.Compare(effective(b, now), effective(a, now)) })
	for _, r := range queue {
		if !next(r) {
			return
		}
	}
}

// due calls f with each timer of h due at now, in no set order.
func (h timerHeap) due(now int64, f func(*timer)) {
	var visit func(i int)
	visit = func(i int) {
		if i >= len(h) || h[i].at > now {
			return
		}
		f(h[i])
		visit(2*i + 1)
		visit(2*i + 2)
	}
	visit(0)
}
