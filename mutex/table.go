package mutex

import (
	"slices"
	"strings"
	"time"
	"unique"
)

// AgingStep is how fast a waiting request's priority grows: one level per
// AgingStep waited. A request of priority p that has waited w is served as
// if its priority were p + w/AgingStep, so a low-priority request that a
// stream of higher ones keeps overtaking gets its turn after at most
// (difference in priority) × AgingStep. Equal priorities stay in arrival
// order, since the earlier request has always waited longer.
const AgingStep = time.Second

// Table is the lock table: a deterministic state machine. Apply takes one
// Command at a time and returns its Result; what it did that others must
// hear of is left in the events that TakeEvents returns. The table reads no
// clock (every command carries its time), starts no goroutine and does no
// I/O; it is not safe for concurrent use (Node serialises commands).
//
// Applying the same commands in the same order to two new tables gives two
// equal tables, including fencing tokens, ids and the order of events:
// nothing depends on map iteration or on the machine.
type Table struct {
	keys     map[string]*entry
	sessions map[uint64]*session
	parked   map[parkKey]*request // parked requests, by parkKey
	accounts map[unique.Handle[string]]*usage

	lastToken   uint64
	lastTicket  uint64
	lastSession uint64
	held        int // holders, all keys

	timers timerHeap
	events []Event
	stats  Counters

	visitGen uint32     // deadlock search: a new mark per search
	stack    []*request // deadlock search: reused
	advanced bool       // the command being applied moved a session's applied id
}

// Counters are what the table has done since it was made (or since
// ResetCounters). They are not part of the table's state: replay counts
// again and a snapshot does not keep them.
type Counters struct {
	Grants          uint64 // grants, at once or after a wait
	Busy            uint64 // tries refused because the key was held
	Withdrawn       uint64 // parked requests withdrawn before a grant
	Deadlocks       uint64 // acquires refused because they would deadlock
	OverHeld        uint64 // acquires refused by their account's cap on locks
	OverParked      uint64 // acquires refused by their account's cap on parked requests
	SessionsOpened  uint64
	SessionExpiries uint64 // sessions whose TTL passed
	LeaseExpiries   uint64 // locks whose lease ran out
	Wait            histogram
}

// entry is one key that has holders, parked requests, or a lock-delay. A
// key held by one holder with no waiters is this struct alone (80 bytes on
// 64-bit platforms) plus its key and the holder's remote address.
type entry struct {
	key   string
	first holder // first.token == 0: no holder
	x     *entryExt
}

// entryExt is what a key needs beyond one holder: more holders, a queue, a
// lock-delay, a limit.
type entryExt struct {
	more        []holder
	head, tail  *request
	queued      int
	prioritized int // queued requests with a priority other than 0

	limit    uint32 // 0 or 1: one exclusive holder
	delay    timer  // lock-delay; delay.at == 0: none
	delayFor int64  // the delay's length, nanoseconds, for a restart
}

// holder is one lock on a key.
type holder struct {
	token    uint64
	source   unique.Handle[string]
	account  unique.Handle[string]
	remote   string
	acquired int64 // node clock, Unix nanoseconds
	s        *hold // nil for a v1 holder
}

// hold is what a lock held by a session keeps beyond holder.
type hold struct {
	sess         *session
	e            *entry
	token        uint64
	request      uint64 // the client's id of the acquire
	mode         Mode
	count        uint32 // reentrancy, at least 1
	owner        unique.Handle[string]
	note         string // the holder's note
	leaseFor     int64  // nanoseconds; 0: no lease
	delayFor     int64  // lock-delay after a loss by expiry, nanoseconds
	lease        timer
	sprev, snext *hold
}

// request is a parked acquire: 112 bytes on 64-bit platforms. What most
// requests leave at its zero value (a v1 account, a lease, a lock-delay,
// a limit, a priority, a deadline) is in x, allocated only for a request
// that names one; the account of a session's request is its session's.
// Its strings are interned: the requests of one connection share its
// remote address, and owners repeat.
type request struct {
	ticket   uint64
	e        *entry
	sess     *session // nil for v1
	request  uint64
	source   unique.Handle[string]
	remote   unique.Handle[string]
	owner    unique.Handle[string]
	queuedAt int64
	x        *requestExt // nil: none of its fields set

	prev, next   *request // the key's queue, in arrival order
	sprev, snext *request // the session's parked requests

	visit     uint32 // deadlock search: the mark of the last search that reached it
	mode      Mode
	reentrant bool
	connBound bool
}

// requestExt is what a request needs beyond the common case.
type requestExt struct {
	account  unique.Handle[string] // a v1 request's, when it names one
	leaseFor int64                 // nanoseconds
	delayFor int64                 // nanoseconds
	limit    uint32                // above 1: the key's limit it asks for
	priority int32
	note     string // the holder's note it will have
	wait     *timer // its deadline; nil: it waits for as long as it takes
}

// intern returns the handle of s; the empty string, the common owner,
// costs no lookup (noAccount is its handle).
func intern(s string) unique.Handle[string] {
	if s == "" {
		return noAccount
	}
	return unique.Make(s)
}

// parkKey finds a parked request: a session's by the session and the
// client's request id, a v1 request by its ticket (session 0).
type parkKey struct{ session, id uint64 }

// key returns where the table keeps r once it has a ticket.
func (r *request) key() parkKey {
	if r.sess != nil {
		return parkKey{r.sess.id, r.request}
	}
	return parkKey{0, r.ticket}
}

// newRequest returns a request of the given fields, with x only when one
// of the fields kept there is set.
func newRequest(e *entry, s *session, id uint64, source, account unique.Handle[string], remote, owner, note string,
	queuedAt, leaseFor, delayFor int64, mode Mode, limit uint32, priority int32, reentrant, connBound bool) *request {
	r := &request{e: e, sess: s, request: id, source: source, owner: intern(owner),
		queuedAt: queuedAt, mode: mode, reentrant: reentrant, connBound: connBound}
	if s == nil {
		r.remote = intern(remote)
	} else {
		r.remote = s.remoteHandle(remote)
	}
	if s != nil || account == noAccount {
		account = unique.Handle[string]{}
	}
	if limit <= 1 {
		limit = 0
	}
	if account != (unique.Handle[string]{}) || leaseFor != 0 || delayFor != 0 || limit != 0 || priority != 0 || note != "" {
		r.x = &requestExt{account: account, leaseFor: leaseFor, delayFor: delayFor, limit: limit, priority: priority,
			note: note}
	}
	return r
}

// setWait gives r a deadline at the node clock's at.
func (r *request) setWait(at int64) *timer {
	if r.x == nil {
		r.x = &requestExt{}
	}
	r.x.wait = &timer{at: at, kind: timerWait, req: r}
	return r.x.wait
}

// wait returns r's deadline, nil without one.
func (r *request) wait() *timer {
	if r.x == nil {
		return nil
	}
	return r.x.wait
}

// account returns who r is charged to: its session's account, or a v1
// request's own.
func (r *request) account() unique.Handle[string] {
	if r.sess != nil {
		return r.sess.account
	}
	if r.x == nil || r.x.account == (unique.Handle[string]{}) {
		return noAccount
	}
	return r.x.account
}

func (r *request) note() string {
	if r.x == nil {
		return ""
	}
	return r.x.note
}

func (r *request) leaseFor() int64 {
	if r.x == nil {
		return 0
	}
	return r.x.leaseFor
}

func (r *request) delayFor() int64 {
	if r.x == nil {
		return 0
	}
	return r.x.delayFor
}

// limit returns the key's limit r asks for: 1, or N for a semaphore.
func (r *request) limit() uint32 {
	if r.x == nil {
		return 1
	}
	return normLimit(r.x.limit)
}

func (r *request) priority() int32 {
	if r.x == nil {
		return 0
	}
	return r.x.priority
}

// session is a client of the session protocol, as the table knows it. Its
// liveness (when it was last heard from) is the Node's business.
type session struct {
	id      uint64
	name    unique.Handle[string]
	account unique.Handle[string]
	ttl     int64
	secret  [SecretHashLen]byte
	opened  int64
	applied uint64

	heldHead, heldTail     *hold
	heldN                  int
	parkedHead, parkedTail *request
	parkedN                int

	remote unique.Handle[string] // the last remote address its requests named: a cache, not state
}

// sourceHandle returns the handle of source, without a lookup when it is
// the session's name (the source of a session-protocol request).
func (s *session) sourceHandle(source string) unique.Handle[string] {
	if s.name.Value() == source {
		return s.name
	}
	return unique.Make(source)
}

// remoteHandle returns the handle of remote, without a lookup when it is
// the address of the session's last request (its connection's).
func (s *session) remoteHandle(remote string) unique.Handle[string] {
	if s.remote == (unique.Handle[string]{}) || s.remote.Value() != remote {
		s.remote = intern(remote)
	}
	return s.remote
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{
		keys:     make(map[string]*entry),
		sessions: make(map[uint64]*session),
		parked:   make(map[parkKey]*request),
		accounts: make(map[unique.Handle[string]]*usage),
		stats:    Counters{Wait: newHistogram()},
	}
}

// TakeEvents returns the events of the commands applied since the last
// call, in the order they happened, and forgets them. The slice is the
// table's until the next Apply: copy what must outlive it.
func (t *Table) TakeEvents() []Event {
	ev := t.events
	t.events = t.events[:0]
	return ev
}

// keyString returns key as a string: the table's own when it has the key,
// otherwise a copy.
func (t *Table) keyString(key []byte) string {
	if e := t.keys[string(key)]; e != nil {
		return e.key
	}
	return string(key)
}

// Counters returns the table's counters.
func (t *Table) Counters() Counters { return t.stats }

// ResetCounters sets every counter to zero, after a replay.
func (t *Table) ResetCounters() { t.stats = Counters{Wait: newHistogram()} }

// LastToken returns the highest fencing token handed out.
func (t *Table) LastToken() uint64 { return t.lastToken }

// Apply applies c and returns its result. It never fails: a command that
// cannot take effect has a Status that says why and changes nothing.
// Result.Changed reports whether the table changed, which is when the
// command must be journaled for a replay to reach the same state. A
// command of a session that passed the check of its request id changed
// the table, whatever its status: the session's highest applied id moved.
func (t *Table) Apply(c *Command) Result {
	t.advanced = false
	tokens := t.lastToken
	r := t.apply(c)
	if t.advanced || t.lastToken != tokens {
		r.Changed = true // a session's id moved, or something was granted
	}
	return r
}

func (t *Table) apply(c *Command) Result {
	if c.Floor > t.lastToken {
		t.lastToken = c.Floor
		t.advanced = true // the counter is state: journal the command
	}
	switch c.Op {
	case OpAcquire:
		return t.acquire(c)
	case OpRelease:
		return t.release(c)
	case OpRenew:
		return t.renew(c)
	case OpCancel:
		return t.cancel(c)
	case OpRevoke:
		return t.revoke(c)
	case OpResetKey:
		return t.resetKey(c)
	case OpResetSource:
		return t.resetSource(c)
	case OpOpenSession:
		return t.openSession(c)
	case OpCloseSession, OpExpireSession:
		return t.endSession(c)
	case OpTick:
		return Result{Changed: t.tick(c.unixNano(), c.At)}
	case OpRestart:
		return t.restart(c)
	}
	return Result{Status: StatusInvalid}
}

// session returns the session of c and whether c may be applied to it: the
// session exists and c's request id is above the highest applied, which it
// then becomes. A refusal is the result to return.
func (t *Table) session(c *Command) (*session, Result, bool) {
	s := t.sessions[c.Session]
	if s == nil {
		return nil, Result{Status: StatusNoSession}, false
	}
	if c.Request <= s.applied {
		return nil, Result{Status: StatusDuplicate}, false
	}
	s.applied = c.Request
	t.advanced = true
	return s, Result{}, true
}

func normLimit(l uint32) uint32 { return max(l, 1) }

// keyLimit is how a key keeps a limit: 0 for one holder, so that equal
// keys are equal however their limit came.
func keyLimit(l uint32) uint32 {
	if l <= 1 {
		return 0
	}
	return l
}

// --- acquire ---

func (t *Table) acquire(c *Command) Result {
	if ValidateKey(c.Key) != nil || c.Mode > Shared || c.Mode == Shared && c.Limit > 1 ||
		c.Lease < 0 || c.Delay < 0 || c.Wait < 0 || len(c.Note) > MaxNoteLen {
		return Result{Status: StatusInvalid}
	}
	var s *session
	if c.Session != 0 {
		var r Result
		var ok bool
		if s, r, ok = t.session(c); !ok {
			return r
		}
	} else if c.Reentrant || c.Lease != 0 || c.Note != "" {
		return Result{Status: StatusInvalid} // v1 has none of them
	}
	now := c.unixNano()
	var account, source unique.Handle[string]
	if s != nil {
		account, source = s.account, s.sourceHandle(c.Source)
	} else {
		account, source = unique.Make(c.Account), unique.Make(c.Source)
	}
	e := t.keys[c.Key]
	if e != nil && e.x != nil && e.x.prioritized > 0 {
		// Aging may have changed the queue's order since the key last
		// changed hands: serve what fits now, before this request counts.
		t.promote(e, now, c.At, nil)
	}
	if e != nil && e.active() {
		if lim := e.limit(); lim != normLimit(c.Limit) {
			return Result{Status: StatusLimitMismatch, Limit: lim}
		}
		if s != nil {
			if h := e.holderOf(s, c.Owner); h != nil {
				hs := h.s
				if hs.mode == Shared && c.Mode == Exclusive {
					return Result{Status: StatusUpgrade}
				}
				if c.Reentrant && hs.mode == c.Mode {
					hs.count++
					return Result{Status: StatusGranted, Token: h.token, Count: hs.count,
						Left: t.leaseLeft(hs, now), Changed: true}
				}
			}
		}
	}
	if t.overLimit(account, c) {
		t.stats.OverHeld++
		return Result{Status: StatusOverLimit}
	}
	if e == nil {
		e = &entry{key: c.Key}
		t.keys[c.Key] = e
	}
	// A key in lock-delay alone takes the limit of the request; a refusal
	// below puts the old one back, since it changes nothing.
	prevLimit := uint32(0)
	if e.x != nil {
		prevLimit = e.x.limit
	}
	if e.x != nil && !e.active() {
		e.x.limit = keyLimit(c.Limit)
	} else if e.x == nil && c.Limit > 1 {
		e.ext().limit = c.Limit
	}
	refuse := func(r Result) Result {
		if e.x != nil {
			e.x.limit = prevLimit
		}
		return r
	}
	if e.queueLen() == 0 && !e.delayed() && e.compatible(c.Mode, normLimit(c.Limit)) {
		h := t.grantHandle(e, s, c.Request, source, account, c.RemoteAddr, c.Mode, intern(c.Owner),
			c.Note, int64(c.Lease), int64(c.Delay), now, 0)
		t.emit(Event{Kind: EventGranted, Key: e.key, Token: h.token, Session: c.Session, Request: c.Request,
			Source: c.Source, Mode: c.Mode, At: c.At, Lease: c.Lease, Note: c.Note})
		return Result{Status: StatusGranted, Token: h.token, Count: 1, Left: c.Lease, Changed: true}
	}
	if c.Try && c.Priority <= 0 {
		t.stats.Busy++
		return refuse(Result{Status: StatusBusy})
	}
	r := newRequest(e, s, c.Request, source, account, c.RemoteAddr, c.Owner, c.Note, now, int64(c.Lease),
		int64(min(c.Delay, MaxLockDelay)), c.Mode, c.Limit, c.Priority, c.Reentrant, c.ConnBound)
	t.enqueue(e, r)
	if granted := t.promote(e, now, c.At, r); granted != nil {
		t.emit(Event{Kind: EventGranted, Key: e.key, Token: granted.token, Session: c.Session,
			Request: c.Request, Source: c.Source, Mode: c.Mode, At: c.At, Lease: c.Lease, Note: c.Note})
		return Result{Status: StatusGranted, Token: granted.token, Count: 1, Left: c.Lease, Changed: true}
	}
	if c.Try {
		t.unlink(r)
		t.stats.Busy++
		return refuse(Result{Status: StatusBusy})
	}
	if t.overParked(account, c) {
		t.unlink(r)
		t.dropIfIdle(e)
		t.stats.OverParked++
		return refuse(Result{Status: StatusOverLimit})
	}
	if s != nil && t.wouldDeadlock(r) {
		t.unlink(r)
		t.dropIfIdle(e)
		t.stats.Deadlocks++
		t.emit(Event{Kind: EventDeadlock, Key: c.Key, Session: c.Session, Request: c.Request,
			Source: c.Source, Mode: c.Mode, At: c.At})
		return refuse(Result{Status: StatusDeadlock})
	}
	t.lastTicket++
	r.ticket = t.lastTicket
	t.parked[r.key()] = r
	if s != nil {
		s.addParked(r)
	}
	if c.Wait > 0 {
		t.timers.push(r.setWait(now + int64(c.Wait)))
	}
	return Result{Status: StatusParked, Ticket: r.ticket, Changed: true}
}

// grantHandle makes a new holder of e with the next fencing token, charged
// to account. The grant is at now after a wait of waited nanoseconds.
func (t *Table) grantHandle(e *entry, s *session, request uint64, source, account unique.Handle[string],
	remote string, mode Mode, owner unique.Handle[string], note string, leaseFor, delayFor, now, waited int64) *holder {
	t.lastToken++
	h := holder{token: t.lastToken, source: source, account: account, remote: remote, acquired: now}
	if s != nil {
		hs := &hold{sess: s, e: e, token: h.token, request: request, mode: mode, count: 1, owner: owner, note: note,
			leaseFor: leaseFor, delayFor: min(delayFor, int64(MaxLockDelay))}
		if leaseFor > 0 {
			hs.lease = timer{at: now + leaseFor, kind: timerLease, hold: hs}
			t.timers.push(&hs.lease)
		}
		s.addHeld(hs)
		h.s = hs
	}
	t.stats.Grants++
	t.stats.Wait.observe(time.Duration(waited))
	t.held++
	t.charge(account, 1, 0)
	return e.addHolder(h)
}

// promote grants the key to its queue's best requests while they fit
// beside the holders, and returns the holder made for want if want was
// among them. It stops at the first that does not fit, so no request
// overtakes one that must wait (a waiting writer holds back later readers).
func (t *Table) promote(e *entry, now int64, at time.Time, want *request) *holder {
	var got *holder
	for e.x != nil && e.x.head != nil && !e.delayed() {
		r := e.best(now)
		if !e.compatible(r.mode, r.limit()) {
			break
		}
		t.unlink(r)
		t.unpark(r)
		h := t.grantHandle(e, r.sess, r.request, r.source, r.account(), r.remote.Value(), r.mode, r.owner,
			r.note(), r.leaseFor(), r.delayFor(), now, now-r.queuedAt)
		if r == want {
			got = h
			continue
		}
		var sid uint64
		if r.sess != nil {
			sid = r.sess.id
		}
		t.emit(Event{Kind: EventGranted, Parked: true, Key: e.key, Token: h.token, Session: sid,
			Request: r.request, Ticket: r.ticket, Source: r.source.Value(), Mode: r.mode, At: at,
			Lease: time.Duration(r.leaseFor()), Note: r.note()})
	}
	return got
}

// unpark forgets the bookkeeping of a parked request that left its queue.
func (t *Table) unpark(r *request) {
	if r.ticket != 0 {
		delete(t.parked, r.key())
		if r.sess != nil {
			r.sess.removeParked(r)
		}
	}
	if w := r.wait(); w != nil {
		t.timers.remove(w)
	}
}

// withdraw takes a parked request out of its queue without the key. With
// promote, those behind it that fit now are granted (a writer that left
// lets readers in); without, the caller promotes the key later.
func (t *Table) withdraw(r *request, reason Reason, at time.Time, promote bool) {
	e := r.e
	t.unlink(r)
	t.unpark(r)
	t.stats.Withdrawn++
	var sid uint64
	if r.sess != nil {
		sid = r.sess.id
	}
	t.emit(Event{Kind: EventWithdrawn, Reason: reason, Key: e.key, Session: sid, Request: r.request,
		Ticket: r.ticket, Source: r.source.Value(), Mode: r.mode, At: at})
	if promote {
		t.settle(e, at)
	}
}

// settle passes e to those of its queue that fit, and drops e when idle.
func (t *Table) settle(e *entry, at time.Time) {
	t.promote(e, at.UnixNano(), at, nil)
	t.dropIfIdle(e)
}

// --- release, renew, revoke, cancel ---

func (t *Table) release(c *Command) Result {
	if c.Session == 0 {
		e := t.keys[c.Key]
		if e == nil || e.first.token == 0 {
			return Result{}
		}
		if e.first.s != nil {
			return Result{Status: StatusNotOwned}
		}
		token := e.first.token
		if !c.grantedBefore(token) {
			return Result{Status: StatusStale} // granted after the unlock was sent
		}
		t.endHolder(e, token, ReasonReleased, false, c.At, true)
		return Result{Token: token, Changed: true}
	}
	s, r, ok := t.session(c)
	if !ok {
		return r
	}
	e := t.keys[c.Key]
	var h *holder
	if e != nil {
		h = e.holderByToken(c.Token)
	}
	if h == nil || h.s == nil || h.s.sess != s {
		return Result{Status: StatusStale}
	}
	if c.Lapse {
		t.endHolder(e, c.Token, ReasonLapsed, true, c.At, true)
		return Result{Token: c.Token, Changed: true}
	}
	if h.s.count > 1 {
		h.s.count--
		return Result{Token: c.Token, Count: h.s.count, Changed: true}
	}
	t.endHolder(e, c.Token, ReasonReleased, false, c.At, true)
	return Result{Token: c.Token, Changed: true}
}

func (t *Table) renew(c *Command) Result {
	s, r, ok := t.session(c)
	if !ok {
		return r
	}
	e := t.keys[c.Key]
	var h *holder
	if e != nil {
		h = e.holderByToken(c.Token)
	}
	if h == nil || h.s == nil || h.s.sess != s || c.Lease < 0 {
		return Result{Status: StatusStale}
	}
	hs := h.s
	if c.Lease > 0 {
		hs.leaseFor = int64(c.Lease)
	}
	if hs.leaseFor == 0 {
		return Result{Token: c.Token}
	}
	now := c.unixNano()
	hs.lease.at, hs.lease.kind, hs.lease.hold = now+hs.leaseFor, timerLease, hs
	t.timers.fix(&hs.lease)
	return Result{Token: c.Token, Left: time.Duration(hs.leaseFor), Changed: true}
}

func (t *Table) revoke(c *Command) Result {
	e := t.keys[c.Key]
	if e == nil || e.holderByToken(c.Token) == nil {
		return Result{Status: StatusStale}
	}
	t.endHolder(e, c.Token, ReasonRevoked, false, c.At, true)
	return Result{Token: c.Token, Changed: true}
}

func (t *Table) cancel(c *Command) Result {
	if c.Session != 0 {
		if _, res, ok := t.session(c); !ok {
			return res
		}
	}
	r := t.cancelled(c)
	if r == nil {
		return Result{Status: StatusNotParked}
	}
	t.withdraw(r, ReasonCancelled, c.At, true)
	return Result{Changed: true}
}

// cancelled returns the parked request that c, a cancel, names; nil when
// it names none that waits.
func (t *Table) cancelled(c *Command) *request {
	switch {
	case c.Session != 0:
		return t.parked[parkKey{c.Session, c.Target}]
	case c.Ticket != 0:
		return t.parked[parkKey{0, c.Ticket}]
	}
	return nil
}

// endHolder removes the holder of token from e for reason. A loss by
// expiry (delay) starts the key's lock-delay when the lock asked for one.
// With promote the key then passes to its queue; without, the caller
// settles it later.
func (t *Table) endHolder(e *entry, token uint64, reason Reason, delay bool, at time.Time, promote bool) {
	h := e.removeHolder(token)
	t.held--
	t.charge(h.account, -1, 0)
	now := at.UnixNano()
	ev := Event{Kind: EventLost, Reason: reason, Key: e.key, Token: h.token, Source: h.source.Value(), At: at}
	if reason == ReasonReleased || reason == ReasonSessionClosed {
		ev.Kind = EventReleased
	}
	if hs := h.s; hs != nil {
		ev.Session, ev.Request, ev.Mode = hs.sess.id, hs.request, hs.mode
		hs.sess.removeHeld(hs)
		t.timers.remove(&hs.lease)
		if delay && hs.delayFor > 0 {
			t.setDelay(e, now, hs.delayFor)
		}
	}
	t.emit(ev)
	if promote {
		t.settle(e, at)
	}
}

// setDelay keeps e from being granted until now+d (or later, if a delay
// already runs longer).
func (t *Table) setDelay(e *entry, now, d int64) {
	x := e.ext()
	until := now + d
	if x.delay.at >= until {
		return
	}
	x.delayFor = d
	x.delay.at, x.delay.kind, x.delay.ent = until, timerDelay, e
	t.timers.fix(&x.delay)
}

func (t *Table) clearDelay(e *entry) bool {
	if e.x == nil || e.x.delay.at == 0 {
		return false
	}
	t.timers.remove(&e.x.delay)
	e.x.delay = timer{}
	e.x.delayFor = 0
	return true
}

// --- resets ---

func (t *Table) resetKey(c *Command) Result {
	e := t.keys[c.Key]
	if e == nil {
		return Result{}
	}
	changed := t.clearDelay(e)
	var tokens []uint64
	e.eachHolder(func(h *holder) {
		if c.grantedBefore(h.token) {
			tokens = append(tokens, h.token)
		}
	})
	for _, token := range tokens {
		t.endHolder(e, token, ReasonReset, false, c.At, false)
		changed = true
	}
	if changed {
		t.settle(e, c.At)
	}
	return Result{Changed: changed}
}

func (t *Table) resetSource(c *Command) Result {
	src := unique.Make(c.Source)
	var parked []*request
	for _, r := range t.parked {
		if r.source == src {
			parked = append(parked, r)
		}
	}
	slices.SortFunc(parked, func(a, b *request) int { return cmpU64(a.ticket, b.ticket) })
	var touched []*entry
	for _, r := range parked {
		touched = append(touched, r.e)
		t.withdraw(r, ReasonReset, c.At, false)
	}
	var keys []string
	for k, e := range t.keys {
		if e.holderFrom(src, c) != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		e := t.keys[k]
		touched = append(touched, e)
		for h := e.holderFrom(src, c); h != nil; h = e.holderFrom(src, c) {
			t.endHolder(e, h.token, ReasonReset, false, c.At, false)
		}
	}
	t.settleAll(touched, c.At)
	return Result{Changed: len(parked) > 0 || len(keys) > 0}
}

// --- sessions ---

func (t *Table) openSession(c *Command) Result {
	if c.TTL <= 0 || len(c.Source) > MaxSourceLen {
		return Result{Status: StatusInvalid}
	}
	t.lastSession++
	s := &session{id: t.lastSession, name: unique.Make(c.Source), account: unique.Make(c.Account), ttl: int64(c.TTL),
		secret: c.SecretHash, opened: c.unixNano()}
	t.sessions[s.id] = s
	t.stats.SessionsOpened++
	return Result{Session: s.id, Changed: true}
}

func (t *Table) endSession(c *Command) Result {
	var s *session
	if c.Op == OpCloseSession {
		var r Result
		var ok bool
		if s, r, ok = t.session(c); !ok {
			return r
		}
	} else if s = t.sessions[c.Session]; s == nil {
		return Result{Status: StatusNoSession}
	}
	reason, expired := ReasonSessionClosed, c.Op == OpExpireSession
	if expired {
		reason = ReasonSessionExpired
		t.stats.SessionExpiries++
	}
	// Nothing is granted until the session has let go of everything: a
	// request of its own behind one of its locks must not get the key.
	var touched []*entry
	for s.parkedHead != nil {
		touched = append(touched, s.parkedHead.e)
		t.withdraw(s.parkedHead, reason, c.At, false)
	}
	for s.heldHead != nil {
		hs := s.heldHead
		touched = append(touched, hs.e)
		t.endHolder(hs.e, hs.token, reason, expired, c.At, false)
	}
	delete(t.sessions, s.id)
	t.settleAll(touched, c.At)
	t.emit(Event{Kind: EventSessionEnded, Reason: reason, Session: s.id, Source: s.name.Value(), At: c.At})
	return Result{Changed: true}
}

// --- time ---

// NextDeadline returns the earliest time at which a tick has work (a
// lease, a lock-delay or a wait ends), and false when there is none.
func (t *Table) NextDeadline() (time.Time, bool) {
	if len(t.timers) == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, t.timers[0].at), true
}

// tick applies every deadline due at now and reports whether any was.
func (t *Table) tick(now int64, at time.Time) bool {
	changed := false
	for len(t.timers) > 0 && t.timers[0].at <= now {
		tm := t.timers.pop()
		changed = true
		switch tm.kind {
		case timerLease:
			hs := tm.hold
			t.stats.LeaseExpiries++
			t.endHolder(hs.e, hs.token, ReasonLeaseExpired, true, at, true)
		case timerWait:
			t.withdraw(tm.req, ReasonTimeout, at, true)
		case timerDelay:
			e := tm.ent
			e.x.delay = timer{}
			e.x.delayFor = 0
			t.settle(e, at)
		}
	}
	return changed
}

func (t *Table) restart(c *Command) Result {
	now := c.unixNano()
	var gone []*request
	for _, r := range t.parked {
		if r.connBound {
			gone = append(gone, r)
		}
	}
	slices.SortFunc(gone, func(a, b *request) int { return cmpU64(a.ticket, b.ticket) })
	touched := make([]*entry, 0, len(gone))
	for _, r := range gone {
		touched = append(touched, r.e)
		t.withdraw(r, ReasonRestart, c.At, false)
	}
	t.settleAll(touched, c.At)
	for _, tm := range t.timers {
		switch tm.kind {
		case timerLease:
			tm.at = max(tm.at, now+tm.hold.leaseFor)
		case timerDelay:
			tm.at = max(tm.at, now+tm.ent.x.delayFor)
		}
	}
	t.timers.init()
	return Result{Changed: true}
}

// leaseLeft returns what is left of hs's lease at now, 0 without one.
func (t *Table) leaseLeft(hs *hold, now int64) time.Duration {
	if hs.leaseFor == 0 {
		return 0
	}
	return time.Duration(max(hs.lease.at-now, 0))
}

func (t *Table) emit(ev Event) { t.events = append(t.events, ev) }

// settleAll settles each entry of es once, in the order they first appear.
// An entry that was dropped is skipped.
func (t *Table) settleAll(es []*entry, at time.Time) {
	for i, e := range es {
		if slices.Index(es[:i], e) >= 0 || t.keys[e.key] != e {
			continue
		}
		t.settle(e, at)
	}
}

// dropIfIdle removes e from the table when nothing holds, waits for or
// delays it.
func (t *Table) dropIfIdle(e *entry) {
	if e.first.token == 0 && (e.x == nil || e.x.head == nil && e.x.delay.at == 0) {
		delete(t.keys, e.key)
	}
}

// --- deadlock detection ---

// wouldDeadlock reports whether parking r would close a cycle in the
// wait-for graph. Nodes are (session, owner) pairs; a v1 request or holder
// belongs to no node and ends every path. r waits for each holder of its
// key that it does not fit beside, and for the nearest request ahead of it
// in the queue that it conflicts with; every request of a node waits on
// behalf of that node. Keys with a limit above one (semaphores) are left
// out: a request there waits for any one holder, not all of them, so a
// path through it proves no deadlock. When the key's queue has requests
// with a priority, only holders are followed (the order of service then
// changes with time). A node that holds nothing and has nothing else
// parked cannot be waited for, which makes the common case free.
//
// The search visits each parked request at most once: O(parked requests +
// holders reached).
func (t *Table) wouldDeadlock(r *request) bool {
	s := r.sess
	if !s.waitedFor(r.owner) {
		return false
	}
	t.visitGen++
	if t.visitGen == 0 {
		// The mark wrapped: an old mark could pass for the new one.
		for _, p := range t.parked {
			p.visit = 0
		}
		t.visitGen = 1
	}
	gen := t.visitGen
	stack := t.stack[:0]
	// found reports whether the node (sess, owner) is r's own; otherwise
	// it pushes that node's parked requests.
	found := false
	visitNode := func(ns *session, owner unique.Handle[string]) {
		if ns == nil || found {
			return
		}
		if ns == s && owner == r.owner {
			found = true
			return
		}
		for p := ns.parkedHead; p != nil; p = p.snext {
			if p.owner == owner && p.visit != gen {
				p.visit = gen
				stack = append(stack, p)
			}
		}
	}
	expand := func(p *request) {
		e := p.e
		if e.limit() > 1 {
			return
		}
		if !e.fitsHolders(p.mode) {
			e.eachHolder(func(h *holder) {
				if h.s != nil {
					visitNode(h.s.sess, h.s.owner)
				}
			})
		}
		if e.x.prioritized > 0 {
			return
		}
		for q := p.prev; q != nil; q = q.prev {
			if q.mode == Exclusive || p.mode == Exclusive {
				if q.sess != nil {
					visitNode(q.sess, q.owner)
				}
				break
			}
		}
	}
	r.visit = gen
	expand(r)
	for len(stack) > 0 && !found {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		expand(p)
	}
	clear(stack)
	t.stack = stack[:0]
	return found
}

// waitedFor reports whether a request may be waiting for the node (s,
// owner): the node holds a key that has requests queued, or has a request
// parked that others queue behind. (A request just parking is last in its
// queue, and queued already: when the node holds that key, it counts.)
// Nobody waits for a node that waitedFor clears, so no cycle of waits can
// pass through it. It answers true without looking when s holds or parks
// more than waitedForScan requests, where the search is left to decide.
func (s *session) waitedFor(owner unique.Handle[string]) bool {
	if s.heldN+s.parkedN > waitedForScan {
		return true
	}
	for h := s.heldHead; h != nil; h = h.snext {
		if h.owner == owner && h.e.x != nil && h.e.x.queued > 0 {
			return true
		}
	}
	for p := s.parkedHead; p != nil; p = p.snext {
		if p.owner == owner && p.next != nil {
			return true
		}
	}
	return false
}

// waitedForScan bounds the scan of waitedFor.
const waitedForScan = 64

// --- entry helpers ---

func (e *entry) ext() *entryExt {
	if e.x == nil {
		e.x = &entryExt{}
	}
	return e.x
}

// active reports whether e has holders or parked requests.
func (e *entry) active() bool { return e.first.token != 0 || e.x != nil && e.x.head != nil }

func (e *entry) limit() uint32 {
	if e.x == nil {
		return 1
	}
	return normLimit(e.x.limit)
}

func (e *entry) queueLen() int {
	if e.x == nil {
		return 0
	}
	return e.x.queued
}

func (e *entry) delayed() bool { return e.x != nil && e.x.delay.at != 0 }

func (e *entry) holders() int {
	if e.first.token == 0 {
		return 0
	}
	if e.x == nil {
		return 1
	}
	return 1 + len(e.x.more)
}

// holdersMode returns the mode the holders share.
func (e *entry) holdersMode() Mode {
	if e.first.s != nil {
		return e.first.s.mode
	}
	return Exclusive
}

// compatible reports whether a request of mode and limit fits beside the
// holders now.
func (e *entry) compatible(mode Mode, limit uint32) bool {
	return fits(e.holders(), e.holdersMode(), mode, limit)
}

// fits reports whether a request of mode and limit fits beside n holders
// of mode held.
func fits(n int, held, mode Mode, limit uint32) bool {
	if n == 0 {
		return true
	}
	if mode == Shared {
		return held == Shared
	}
	return held == Exclusive && uint32(n) < limit
}

// fitsHolders reports whether a request of mode would fit beside the
// holders, whatever the queue.
func (e *entry) fitsHolders(mode Mode) bool { return e.compatible(mode, e.limit()) }

func (e *entry) eachHolder(f func(*holder)) {
	if e.first.token == 0 {
		return
	}
	f(&e.first)
	if e.x != nil {
		for i := range e.x.more {
			f(&e.x.more[i])
		}
	}
}

func (e *entry) holderByToken(token uint64) *holder {
	if token == 0 {
		return nil
	}
	var found *holder
	e.eachHolder(func(h *holder) {
		if h.token == token {
			found = h
		}
	})
	return found
}

func (e *entry) holderOf(s *session, owner string) *holder {
	var found *holder
	e.eachHolder(func(h *holder) {
		if found == nil && h.s != nil && h.s.sess == s && h.s.owner.Value() == owner {
			found = h
		}
	})
	return found
}

// holderFrom returns a holder of e whose source is src and that c, a
// reset, may end (Command.grantedBefore); nil when there is none.
func (e *entry) holderFrom(src unique.Handle[string], c *Command) *holder {
	var found *holder
	e.eachHolder(func(h *holder) {
		if found == nil && h.source == src && c.grantedBefore(h.token) {
			found = h
		}
	})
	return found
}

// addHolder adds h and returns where it is kept.
func (e *entry) addHolder(h holder) *holder {
	if e.first.token == 0 {
		e.first = h
		return &e.first
	}
	x := e.ext()
	x.more = append(x.more, h)
	return &x.more[len(x.more)-1]
}

// removeHolder removes the holder of token and returns it; the caller has
// checked that it holds e.
func (e *entry) removeHolder(token uint64) holder {
	if e.first.token == token {
		h := e.first
		if e.x != nil && len(e.x.more) > 0 {
			e.first = e.x.more[0]
			e.x.more = slices.Delete(e.x.more, 0, 1)
		} else {
			e.first = holder{}
		}
		return h
	}
	for i, h := range e.x.more {
		if h.token == token {
			e.x.more = slices.Delete(e.x.more, i, i+1)
			return h
		}
	}
	panic("mutex: removeHolder of a token that does not hold the key")
}

func (e *entry) enqueue(r *request) {
	x := e.ext()
	if x.tail == nil {
		x.head = r
	} else {
		x.tail.next, r.prev = r, x.tail
	}
	x.tail = r
	x.queued++
	if r.priority() != 0 {
		x.prioritized++
	}
}

func (e *entry) unlink(r *request) {
	x := e.x
	if r.prev == nil {
		x.head = r.next
	} else {
		r.prev.next = r.next
	}
	if r.next == nil {
		x.tail = r.prev
	} else {
		r.next.prev = r.prev
	}
	r.prev, r.next = nil, nil
	x.queued--
	if r.priority() != 0 {
		x.prioritized--
	}
}

// best returns the request the queue serves next at now: the highest
// priority after aging, the earliest among equals. Without priorities it
// is the head.
func (e *entry) best(now int64) *request {
	x := e.x
	if x.prioritized == 0 {
		return x.head
	}
	best, bestP := x.head, effective(x.head, now)
	for r := x.head.next; r != nil; r = r.next {
		if p := effective(r, now); p > bestP {
			best, bestP = r, p
		}
	}
	return best
}

// effective returns r's priority at now, aged by its wait.
func effective(r *request, now int64) int64 {
	return int64(r.priority()) + max(now-r.queuedAt, 0)/int64(AgingStep)
}

// --- session lists ---

func (s *session) addHeld(h *hold) {
	if s.heldTail == nil {
		s.heldHead = h
	} else {
		s.heldTail.snext, h.sprev = h, s.heldTail
	}
	s.heldTail = h
	s.heldN++
}

func (s *session) removeHeld(h *hold) {
	if h.sprev == nil {
		s.heldHead = h.snext
	} else {
		h.sprev.snext = h.snext
	}
	if h.snext == nil {
		s.heldTail = h.sprev
	} else {
		h.snext.sprev = h.sprev
	}
	h.sprev, h.snext = nil, nil
	s.heldN--
}

func (s *session) addParked(r *request) {
	if s.parkedTail == nil {
		s.parkedHead = r
	} else {
		s.parkedTail.snext, r.sprev = r, s.parkedTail
	}
	s.parkedTail = r
	s.parkedN++
}

func (s *session) removeParked(r *request) {
	if r.sprev == nil {
		s.parkedHead = r.snext
	} else {
		r.sprev.snext = r.snext
	}
	if r.snext == nil {
		s.parkedTail = r.sprev
	} else {
		r.snext.sprev = r.sprev
	}
	r.sprev, r.snext = nil, nil
	s.parkedN--
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// --- timers ---

type timerKind uint8

const (
	timerLease timerKind = iota + 1
	timerWait
	timerDelay
)

// timer is a deadline in the table's heap. idx is its place there, -1 when
// it is not in it.
type timer struct {
	at   int64
	idx  int
	kind timerKind
	hold *hold
	req  *request
	ent  *entry
}

// id breaks ties between timers due at the same instant, so that the
// order of a tick's work depends on the table's state only, never on the
// heap's shape.
func (tm *timer) less(o *timer) bool {
	if tm.at != o.at {
		return tm.at < o.at
	}
	if tm.kind != o.kind {
		return tm.kind < o.kind
	}
	switch tm.kind {
	case timerLease:
		return tm.hold.token < o.hold.token
	case timerWait:
		return tm.req.ticket < o.req.ticket
	}
	return strings.Compare(tm.ent.key, o.ent.key) < 0
}

type timerHeap []*timer

func (h *timerHeap) push(tm *timer) {
	tm.idx = len(*h)
	*h = append(*h, tm)
	h.up(tm.idx)
}

func (h *timerHeap) pop() *timer {
	old := *h
	tm := old[0]
	n := len(old) - 1
	h.swap(0, n)
	old[n] = nil
	*h = old[:n]
	if n > 0 {
		h.down(0)
	}
	tm.idx = -1
	return tm
}

func (h *timerHeap) remove(tm *timer) {
	i := tm.idx
	if i < 0 || i >= len(*h) || (*h)[i] != tm {
		return
	}
	old := *h
	n := len(old) - 1
	if i != n {
		h.swap(i, n)
	}
	old[n] = nil
	*h = old[:n]
	if i != n {
		h.down(i)
		h.up(i)
	}
	tm.idx = -1
}

func (h *timerHeap) fix(tm *timer) {
	if tm.idx < 0 || tm.idx >= len(*h) || (*h)[tm.idx] != tm {
		h.push(tm)
		return
	}
	h.down(tm.idx)
	h.up(tm.idx)
}

func (h *timerHeap) init() {
	for i := len(*h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}

func (h timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h.swap(i, p)
		i = p
	}
}

func (h timerHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			return
		}
		h.swap(i, m)
		i = m
	}
}
