package mutex

import (
	"slices"
	"time"
	"unique"
)

// RecordKind says what part of a table's state a Record holds.
type RecordKind uint8

const (
	// RecordState: the counters that number tokens, tickets and sessions.
	RecordState RecordKind = iota + 1
	// RecordSession: one session.
	RecordSession
	// RecordKey: a key's limit and lock-delay, when it has either.
	RecordKey
	// RecordHolder: one lock.
	RecordHolder
	// RecordWaiter: one parked request.
	RecordWaiter
)

// Record is one piece of a table's state. Export writes a table as
// records; Import reads them back into an empty table, which then equals
// the exported one: applying the same commands to both gives the same
// results. Which fields matter depends on Kind.
type Record struct {
	Kind RecordKind

	LastToken, LastTicket, LastSession uint64 // state

	Session    uint64 // session: its id; holder, waiter: theirs (0 for v1)
	Name       string // session
	TTL        time.Duration
	SecretHash [SecretHashLen]byte
	Opened     time.Time
	Applied    uint64

	Key      string        // key, holder, waiter
	Limit    uint32        // key, waiter
	DelayAt  time.Time     // key: when its lock-delay ends; zero: none
	DelayFor time.Duration // key: the running delay's length; holder, waiter: the lock's delay

	Token      uint64 // holder
	Ticket     uint64 // waiter
	Request    uint64 // holder, waiter: the client's request id
	Source     string
	Account    string // session, and v1 holder and waiter: who is charged for it
	RemoteAddr string
	Acquired   time.Time // holder
	QueuedAt   time.Time // waiter
	Mode       Mode
	Count      uint32        // holder
	Owner      string        // holder, waiter
	Note       string        // holder, waiter: the holder's note
	LeaseFor   time.Duration // holder, waiter
	LeaseAt    time.Time     // holder: when its lease ends; zero: none
	Priority   int32         // waiter
	Reentrant  bool          // waiter
	ConnBound  bool          // waiter
	WaitAt     time.Time     // waiter: when its wait ends; zero: never
}

func nanoTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func timeNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// Export calls f with every record of the table's state, in an order that
// Import accepts: the state, the sessions by id, then key by key (by their
// bytes) the key's record, its holders and its waiters in order.
func (t *Table) Export(f func(*Record)) {
	f(&Record{Kind: RecordState, LastToken: t.lastToken, LastTicket: t.lastTicket, LastSession: t.lastSession})
	ids := make([]uint64, 0, len(t.sessions))
	for id := range t.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s := t.sessions[id]
		f(&Record{Kind: RecordSession, Session: s.id, Name: s.name.Value(), Account: s.account.Value(),
			TTL: time.Duration(s.ttl), SecretHash: s.secret, Opened: nanoTime(s.opened), Applied: s.applied})
	}
	keys := make([]string, 0, len(t.keys))
	for k := range t.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		e := t.keys[k]
		if x := e.x; x != nil && (x.limit > 1 || x.delay.at != 0) {
			f(&Record{Kind: RecordKey, Key: k, Limit: x.limit, DelayAt: nanoTime(x.delay.at),
				DelayFor: time.Duration(x.delayFor)})
		}
		e.eachHolder(func(h *holder) {
			r := Record{Kind: RecordHolder, Key: k, Token: h.token, Source: h.source.Value(),
				RemoteAddr: h.remote, Acquired: nanoTime(h.acquired), Count: 1}
			if hs := h.s; hs == nil {
				r.Account = h.account.Value()
			} else {
				r.Session, r.Request, r.Mode, r.Count, r.Owner = hs.sess.id, hs.request, hs.mode, hs.count, hs.owner.Value()
				r.Note = hs.note
				r.LeaseFor, r.DelayFor = time.Duration(hs.leaseFor), time.Duration(hs.delayFor)
				if hs.leaseFor > 0 {
					r.LeaseAt = nanoTime(hs.lease.at)
				}
			}
			f(&r)
		})
		if e.x == nil {
			continue
		}
		for q := e.x.head; q != nil; q = q.next {
			r := Record{Kind: RecordWaiter, Key: k, Ticket: q.ticket, Request: q.request,
				Source: q.source.Value(), RemoteAddr: q.remote.Value(), QueuedAt: nanoTime(q.queuedAt),
				Mode: q.mode, Limit: q.limit(), Owner: q.owner.Value(), Note: q.note(), LeaseFor: time.Duration(q.leaseFor()),
				DelayFor: time.Duration(q.delayFor()), Priority: q.priority(), Reentrant: q.reentrant,
				ConnBound: q.connBound}
			if w := q.wait(); w != nil {
				r.WaitAt = nanoTime(w.at)
			}
			if q.sess != nil {
				r.Session = q.sess.id
			} else {
				r.Account = q.account().Value()
			}
			f(&r)
		}
	}
}

// Import adds one record of an exported state to the table. Call it on a
// new table, with records in the order Export wrote them, then call
// FinishImport. A record that does not fit (a holder of a session that was
// not imported, a waiter of an unknown key) returns false and changes
// nothing.
func (t *Table) Import(r *Record) bool {
	switch r.Kind {
	case RecordState:
		t.lastToken = max(t.lastToken, r.LastToken)
		t.lastTicket = max(t.lastTicket, r.LastTicket)
		t.lastSession = max(t.lastSession, r.LastSession)
	case RecordSession:
		if r.Session == 0 || t.sessions[r.Session] != nil {
			return false
		}
		t.sessions[r.Session] = &session{id: r.Session, name: unique.Make(r.Name), account: unique.Make(r.Account), ttl: int64(r.TTL),
			secret: r.SecretHash, opened: timeNano(r.Opened), applied: r.Applied}
	case RecordKey:
		if ValidateKey(r.Key) != nil || t.keys[r.Key] != nil {
			return false
		}
		e := &entry{key: r.Key}
		t.keys[r.Key] = e
		x := e.ext()
		x.limit = keyLimit(r.Limit)
		if !r.DelayAt.IsZero() {
			x.delayFor = int64(r.DelayFor)
			x.delay = timer{at: r.DelayAt.UnixNano(), kind: timerDelay, ent: e}
			t.timers.push(&x.delay)
		}
	case RecordHolder:
		return t.importHolder(r)
	case RecordWaiter:
		return t.importWaiter(r)
	default:
		return false
	}
	return true
}

func (t *Table) entryFor(key string) *entry {
	e := t.keys[key]
	if e == nil {
		e = &entry{key: key}
		t.keys[key] = e
	}
	return e
}

func (t *Table) importHolder(r *Record) bool {
	if ValidateKey(r.Key) != nil || r.Token == 0 {
		return false
	}
	var s *session
	if r.Session != 0 {
		if s = t.sessions[r.Session]; s == nil {
			return false
		}
	}
	e := t.entryFor(r.Key)
	h := holder{token: r.Token, source: unique.Make(r.Source), account: unique.Make(r.Account), remote: r.RemoteAddr,
		acquired: timeNano(r.Acquired)}
	if s != nil {
		h.account = s.account
		hs := &hold{sess: s, e: e, token: r.Token, request: r.Request, mode: r.Mode, count: max(r.Count, 1),
			owner: intern(r.Owner), note: r.Note, leaseFor: int64(r.LeaseFor), delayFor: int64(r.DelayFor)}
		if hs.leaseFor > 0 {
			hs.lease = timer{at: timeNano(r.LeaseAt), kind: timerLease, hold: hs}
			t.timers.push(&hs.lease)
		}
		s.addHeld(hs)
		h.s = hs
	}
	e.addHolder(h)
	t.held++
	t.charge(h.account, 1, 0)
	t.lastToken = max(t.lastToken, r.Token)
	return true
}

func (t *Table) importWaiter(r *Record) bool {
	if ValidateKey(r.Key) != nil || r.Ticket == 0 {
		return false
	}
	var s *session
	if r.Session != 0 {
		if s = t.sessions[r.Session]; s == nil {
			return false
		}
	}
	e := t.entryFor(r.Key)
	q := newRequest(e, s, r.Request, unique.Make(r.Source), unique.Make(r.Account), r.RemoteAddr, r.Owner, r.Note,
		timeNano(r.QueuedAt), int64(r.LeaseFor), int64(r.DelayFor), r.Mode, r.Limit, r.Priority, r.Reentrant, r.ConnBound)
	q.ticket = r.Ticket
	if t.parked[q.key()] != nil {
		return false
	}
	t.enqueue(e, q)
	t.parked[q.key()] = q
	if s != nil {
		s.addParked(q)
	}
	if !r.WaitAt.IsZero() {
		t.timers.push(q.setWait(r.WaitAt.UnixNano()))
	}
	t.lastTicket = max(t.lastTicket, r.Ticket)
	return true
}

// FinishImport puts each session's locks and requests back in the order
// the table made them (by token and by ticket), as Export's key order
// lost it.
func (t *Table) FinishImport() {
	for _, s := range t.sessions {
		var hs []*hold
		for h := s.heldHead; h != nil; h = h.snext {
			hs = append(hs, h)
		}
		slices.SortFunc(hs, func(a, b *hold) int { return cmpU64(a.token, b.token) })
		s.heldHead, s.heldTail, s.heldN = nil, nil, 0
		for _, h := range hs {
			h.sprev, h.snext = nil, nil
			s.addHeld(h)
		}
		var rs []*request
		for r := s.parkedHead; r != nil; r = r.snext {
			rs = append(rs, r)
		}
		slices.SortFunc(rs, func(a, b *request) int { return cmpU64(a.ticket, b.ticket) })
		s.parkedHead, s.parkedTail, s.parkedN = nil, nil, 0
		for _, r := range rs {
			r.sprev, r.snext = nil, nil
			s.addParked(r)
		}
	}
}

// RestoreV1 installs a v1 holder of key read from a log written before
// fencing tokens, with the next token, in place of any holder the key has
// (such a log's later grant of a key wins). It is for replay only.
func (t *Table) RestoreV1(key, source, remote string, acquired time.Time) {
	e := t.entryFor(key)
	for e.first.token != 0 {
		h := e.removeHolder(e.first.token)
		t.held--
		t.charge(h.account, -1, 0)
		if h.s != nil {
			h.s.sess.removeHeld(h.s)
			t.timers.remove(&h.s.lease)
		}
	}
	t.lastToken++
	t.held++
	e.addHolder(holder{token: t.lastToken, source: unique.Make(source), account: noAccount, remote: remote,
		acquired: timeNano(acquired)})
}

// Records returns about how many records Export would write: the state,
// the sessions, the holders and the waiters (keys with a limit or a
// lock-delay of their own are not counted).
func (t *Table) Records() int { return 1 + len(t.sessions) + t.held + len(t.parked) }

// Clone returns a table equal to t, sharing nothing with it.
func (t *Table) Clone() *Table {
	c := NewTable()
	t.Export(func(r *Record) { c.Import(r) })
	c.FinishImport()
	return c
}

// Len returns the number of keys in the table: held, waited for or in
// lock-delay.
func (t *Table) Len() int { return len(t.keys) }

// SessionState is what a session holds and waits for, for a resume.
type SessionState struct {
	ID         uint64
	Name       string
	Account    string // who its locks are charged to
	SecretHash [SecretHashLen]byte
	TTL        time.Duration
	Applied    uint64
	Held       []HeldLock   // in the order they were granted
	Parked     []ParkedLock // in the order they were made
}

// HeldLock is a lock of a session.
type HeldLock struct {
	Key       string
	Token     uint64
	Request   uint64
	Mode      Mode
	Count     uint32
	Leased    bool
	LeaseLeft time.Duration
}

// ParkedLock is a waiting request of a session.
type ParkedLock struct {
	Key     string
	Request uint64
	Ticket  uint64
}

// sessionState returns the state of session id at now.
func (t *Table) sessionState(id uint64, now int64) (SessionState, bool) {
	s := t.sessions[id]
	if s == nil {
		return SessionState{}, false
	}
	st := SessionState{ID: id, Name: s.name.Value(), Account: s.account.Value(), SecretHash: s.secret, TTL: time.Duration(s.ttl), Applied: s.applied}
	for h := s.heldHead; h != nil; h = h.snext {
		st.Held = append(st.Held, HeldLock{Key: h.e.key, Token: h.token, Request: h.request, Mode: h.mode,
			Count: h.count, Leased: h.leaseFor > 0, LeaseLeft: t.leaseLeft(h, now)})
	}
	for r := s.parkedHead; r != nil; r = r.snext {
		st.Parked = append(st.Parked, ParkedLock{Key: r.e.key, Request: r.request, Ticket: r.ticket})
	}
	return st, true
}

// KeyInfo describes one key.
type KeyInfo struct {
	Key       string
	Holders   []Holder
	Queue     int
	DelayLeft time.Duration
}

// describe returns the key's holders, queue and lock-delay at now.
func (t *Table) describe(key string, now time.Time) KeyInfo {
	info := KeyInfo{Key: key}
	e := t.keys[key]
	if e == nil {
		return info
	}
	ns := now.UnixNano()
	info.Queue = e.queueLen()
	if e.delayed() {
		info.DelayLeft = time.Duration(max(e.x.delay.at-ns, 0))
	}
	lim := e.limit()
	e.eachHolder(func(h *holder) { info.Holders = append(info.Holders, t.holderInfo(key, h, lim, info.Queue, ns)) })
	return info
}

// sessionIDs returns the ids of every session, sorted.
func (t *Table) sessionIDs() []uint64 {
	ids := make([]uint64, 0, len(t.sessions))
	for id := range t.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
