package mutex

import (
	"context"
	"crypto/subtle"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// NewClock returns the clock a Node uses by default: the wall clock at the
// moment NewClock is called, advanced by the monotonic clock since. It
// never steps when the system's wall clock is set, so every deadline the
// table keeps runs for its real length; its readings carry no monotonic
// part, so a command's At means the same after it was written to a log.
func NewClock() func() time.Time {
	base := time.Now()
	return func() time.Time { return base.Add(time.Since(base)).Round(0) }
}

// NodeConfig configures a Node.
type NodeConfig struct {
	// Journal receives every command that changed the table; nil keeps
	// the table in memory only.
	Journal Journal
	// Table is a table read back from a journal, to go on from; nil starts
	// empty. The node applies OpRestart to it first.
	Table *Table
	// Clock returns the time stamped on each command; nil means NewClock().
	// Tests inject their own.
	Clock func() time.Time
	// Replicator, when set, commits every command through a replicated
	// log before any node applies it (see Replicator); Journal is then
	// unused. The node changes the table only while SetLeader(true).
	Replicator Replicator
	// Limits caps what one account may hold and have parked; the node
	// stamps them on every acquire it is handed. Zero: no caps.
	Limits Limits
}

// Waker hears how a parked request ends: EventGranted or EventWithdrawn,
// with the Pending of the command that did it. It is called once, by the
// goroutine whose command ended the wait, after the node's lock is
// released; it may call the node but should not block for long.
type Waker func(ev Event, p Pending)

// Route receives what concerns one session, in the order it happened:
// the result of each command applied with ApplySession, and each event
// about the session (a grant after a wait, a withdrawal, a lost lock, the
// session's end). Deliver is called with the node's lock held and must
// neither block nor call the node; Flush is called after the lock is
// released, by the goroutine that delivered, to write what was delivered.
type Route interface {
	Deliver(o Output)
	Flush()
}

// Output is one thing delivered to a Route: a Result of one of the
// session's commands, or an Event.
type Output struct {
	IsEvent bool
	Event   Event
	Command Command // the command the result answers
	Result  Result
	Pending Pending // durability of the command that produced it
}

// Live is a session's liveness, kept by the node beside the table: when
// the session was last heard from. Touch it on every frame; a session not
// touched for its TTL expires.
type Live struct {
	node     *Node
	id       uint64
	ttl      int64
	lastSeen atomic.Int64 // node clock, Unix nanoseconds

	// Guarded by the node's lock.
	deadline int64 // the expiry heap's key
	idx      int
	route    Route
	mailbox  []Output // delivered while no route was attached
	remote   string
}

// ID returns the session's id.
func (l *Live) ID() uint64 { return l.id }

// TTL returns the session's TTL.
func (l *Live) TTL() time.Duration { return time.Duration(l.ttl) }

// Touch records that the session's client was just heard from.
func (l *Live) Touch() { l.lastSeen.Store(l.node.now().UnixNano()) }

// Node drives one Table: it stamps each command with its clock, expires
// sessions whose TTL has passed before anything else is applied (so no
// request is ever granted to a dead session), applies commands one at a
// time, hands each that changed the table to the Journal, fires ticks at
// the table's deadlines, and delivers events to the Waker of a parked v1
// request or the Route of a session. It is safe for concurrent use.
type Node struct {
	mu      sync.Mutex
	t       *Table
	journal Journal
	now     func() time.Time

	wakers map[uint64]Waker       // by ticket
	probes map[uint64]func() bool // by ticket: whether the request's client left (ApplyWatched)
	lives  map[uint64]*Live       // by session id
	expiry []*Live                // heap by deadline
	timer  *time.Timer
	armed  int64 // when the timer fires, 0: not armed
	closed bool

	resumes  uint64
	refusals [numRefusals]atomic.Uint64
	limits   Limits

	observers []observer
	nextObs   uint64

	// A replicated node's.
	rep          Replicator
	pmu          sync.Mutex // orders proposals, expiries first
	instance     uint64     // tells this node's proposals apart
	proposals    map[uint64]*proposal
	nextProposal uint64
	leader       bool
	position     uint64        // of the entry ApplyCommitted applies now
	replaced     atomic.Uint64 // tables Replace put in place
}

// observer is one function that Observe registered.
type observer struct {
	id uint64
	fn func(Event)
}

// Observe calls f with every event of the table from now on, in the order
// the table made them: grants (at once and after a wait), withdrawals,
// losses, releases, sessions' ends, deadlocks. f is called with the node's
// lock held: it must neither block nor call the node (queue the event and
// return). The returned function stops the calls; it is safe to call more
// than once.
func (n *Node) Observe(f func(Event)) (stop func()) {
	n.mu.Lock()
	n.nextObs++
	id := n.nextObs
	n.observers = append(n.observers, observer{id: id, fn: f})
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.observers = slices.DeleteFunc(n.observers, func(o observer) bool { return o.id == id })
	}
}

// Locked calls f with the node's lock held: the lock its observers are
// called with (Observe), so that f may read what an observer keeps with no
// lock of the observer's own, and the observer need take none. f must
// neither block nor call the node.
func (n *Node) Locked(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f()
}

// NewNode returns a node over cfg.Table (or an empty table) and applies
// OpRestart to it. Sessions read back from a journal get a fresh TTL from
// now, so that their clients can resume.
func NewNode(cfg NodeConfig) *Node {
	n := &Node{
		t:       cfg.Table,
		journal: cfg.Journal,
		now:     cfg.Clock,
		wakers:  make(map[uint64]Waker),
		probes:  make(map[uint64]func() bool),
		lives:   make(map[uint64]*Live),
		rep:     cfg.Replicator,
		limits:  cfg.Limits,
	}
	if n.t == nil {
		n.t = NewTable()
	}
	if n.now == nil {
		n.now = NewClock()
	}
	n.t.ResetCounters()
	if n.rep != nil {
		n.journal = nil
		n.instance = instanceID()
		n.proposals = make(map[uint64]*proposal)
		return n // the leader restarts the table when it is elected
	}
	var d deliveries
	n.mu.Lock()
	now := n.now()
	// Tokens go on above the journal's and above the clock, which is all a
	// node without a journal has to go on from (see Command.Floor).
	n.applyLocked(&Command{Op: OpRestart, At: now, Floor: uint64(max(now.UnixNano(), 0))}, &d)
	for _, id := range n.t.sessionIDs() {
		n.addLive(id, time.Duration(n.t.sessions[id].ttl), now.UnixNano())
	}
	n.arm(now.UnixNano())
	n.mu.Unlock()
	d.run()
	return n
}

// Now returns the node's clock.
func (n *Node) Now() time.Time { return n.now() }

// Close stops the node's timer. Commands may still be applied (front ends
// close first); no tick fires after Close. It is safe to call more than
// once.
func (n *Node) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	if n.timer != nil {
		n.timer.Stop()
	}
}

// wake is a Waker call due once the lock is released.
type wake struct {
	w  Waker
	ev Event
	p  Pending
}

// deliveries collects what one call owes others, to do after the lock.
// It stays on its caller's stack: the first route, the only one of most
// calls, is kept in place and allocates nothing (room for more in the
// struct itself, a slice into it, would move it to the heap).
type deliveries struct {
	wakes  []wake
	route  Route   // the first route; nil: none
	routes []Route // the others
}

func (d *deliveries) addRoute(r Route) {
	if d.route == nil {
		d.route = r
		return
	}
	if d.route == r {
		return
	}
	for _, x := range d.routes {
		if x == r {
			return
		}
	}
	d.routes = append(d.routes, r)
}

func (d *deliveries) run() {
	for i, w := range d.wakes {
		w.w(w.ev, w.p)
		d.wakes[i] = wake{}
	}
	if d.route != nil {
		d.route.Flush()
	}
	for _, r := range d.routes {
		r.Flush()
	}
}

// Apply applies c at the node's clock and returns its result and, when
// it changed the table and a journal is set, the journal's Pending. A
// parked request's end goes to no one; use ApplyWake for an acquire that
// may park.
func (n *Node) Apply(c Command) (Result, Pending) { return n.ApplyWake(c, nil) }

// ApplyWake is Apply with w to call when c, an acquire, parks and later
// ends its wait.
func (n *Node) ApplyWake(c Command, w Waker) (Result, Pending) { return n.ApplyWatched(c, w, nil) }

// ApplyWatched is ApplyWake for a v1 acquire whose client its caller can
// watch: gone reports, without waiting, whether the client has left (the
// end of its connection is queued on the socket, say). While the request
// waits, the node asks gone before any command that would grant it the
// key, and if the client has left, withdraws the request first with a
// cancel of its own (w hears EventWithdrawn, ReasonCancelled), and the
// key goes to the next request. gone is called with the node's lock held:
// it must neither block nor call the node. Nil: ApplyWake.
func (n *Node) ApplyWatched(c Command, w Waker, gone func() bool) (Result, Pending) {
	if n.rep != nil {
		return n.propose(c, &proposal{waker: w, gone: gone}), nil
	}
	var d deliveries
	n.mu.Lock()
	now := n.now()
	c.At = now
	n.stamp(&c)
	ns := now.UnixNano()
	n.expireDue(ns, &d)
	res, p := n.applyLocked(&c, &d)
	if res.Status == StatusParked && w != nil {
		n.watch(res.Ticket, w, gone)
	}
	n.arm(ns)
	n.mu.Unlock()
	d.run()
	return res, p
}

// ApplySession applies c, a command of session c.Session, and delivers
// its result to the session's Route in order with the session's events.
// It also returns the result; delivered is false when the session has no
// Live (it ended), and then nothing was delivered.
func (n *Node) ApplySession(c Command) (res Result, p Pending, delivered bool) {
	return n.ApplySessionKey(c, nil)
}

// ApplySessionKey is ApplySession for a command whose key its caller has
// as bytes (say, in a frame it decoded): unless key is nil, c.Key is set
// from it, as the table's own string when the table has the key, so that
// a command on a key in use copies no bytes. key is not kept.
func (n *Node) ApplySessionKey(c Command, key []byte) (res Result, p Pending, delivered bool) {
	if n.rep != nil {
		if key != nil {
			c.Key = string(key)
		}
		res = n.propose(c, &proposal{session: true})
		return res, nil, res.Status != StatusNoSession && res.Status != StatusUnavailable
	}
	var d deliveries
	n.mu.Lock()
	if key != nil {
		c.Key = n.t.keyString(key)
	}
	now := n.now()
	c.At = now
	n.stamp(&c)
	ns := now.UnixNano()
	n.expireDue(ns, &d)
	// The session's Live is taken before: a close ends it.
	l := n.lives[c.Session]
	res, p = n.applyLocked(&c, &d)
	// The events of the command went first (a close's withdrawals); then
	// its result.
	if l != nil {
		n.deliver(l, Output{Command: c, Result: res, Pending: p}, &d)
		delivered = true
	}
	n.arm(ns)
	n.mu.Unlock()
	d.run()
	return res, p, delivered
}

// applyLocked applies c on a single node: first a cancel of each parked
// request that c would grant and whose client has left (goneAhead), then
// c.
func (n *Node) applyLocked(c *Command, d *deliveries) (Result, Pending) {
	for _, ticket := range n.goneAhead(c, nil) {
		n.applyOne(cancelOf(ticket, c.At), d)
	}
	return n.applyOne(c, d)
}

// applyOne applies c, journals it and routes its events.
func (n *Node) applyOne(c *Command, d *deliveries) (Result, Pending) {
	res := n.t.Apply(c)
	var p Pending
	if res.Changed && n.journal != nil {
		// A copy: c itself stays on its caller's stack when there is no
		// journal (an interface's method keeps what it is given, as far
		// as the compiler knows).
		jc := *c
		p = n.journal.Append(&jc)
	}
	if c.Op == OpOpenSession && res.Status == StatusOK {
		n.addLive(res.Session, c.TTL, c.unixNano())
	}
	for _, ev := range n.t.TakeEvents() {
		n.route(ev, p, d)
	}
	return res, p
}

// route sends ev to the observers and to whoever waits for it.
func (n *Node) route(ev Event, p Pending, d *deliveries) {
	ev.Position = n.position
	for _, o := range n.observers {
		o.fn(ev)
	}
	switch ev.Kind {
	case EventGranted, EventWithdrawn:
		if ev.Kind == EventGranted && !ev.Parked {
			return // the acquire's own result
		}
		if ev.Session == 0 {
			if w := n.wakers[ev.Ticket]; w != nil {
				delete(n.wakers, ev.Ticket)
				delete(n.probes, ev.Ticket)
				d.wakes = append(d.wakes, wake{w, ev, p})
			}
			return
		}
	case EventLost:
		if ev.Session == 0 {
			return
		}
	case EventSessionEnded:
	default:
		return
	}
	l := n.lives[ev.Session]
	if l == nil {
		return
	}
	n.deliver(l, Output{IsEvent: true, Event: ev, Pending: p}, d)
	if ev.Kind == EventSessionEnded {
		n.removeLive(l)
	}
}

func (n *Node) deliver(l *Live, o Output, d *deliveries) {
	if l.route == nil {
		l.mailbox = append(l.mailbox, o)
		return
	}
	l.route.Deliver(o)
	d.addRoute(l.route)
}

// --- sessions ---

func (n *Node) addLive(id uint64, ttl time.Duration, now int64) *Live {
	l := &Live{node: n, id: id, ttl: int64(ttl), deadline: now + int64(ttl)}
	l.lastSeen.Store(now)
	n.lives[id] = l
	l.idx = len(n.expiry)
	n.expiry = append(n.expiry, l)
	n.expiryUp(l.idx)
	return l
}

func (n *Node) removeLive(l *Live) {
	delete(n.lives, l.id)
	n.dropExpiry(l)
}

// popExpiry takes the first session off the expiry heap; it stays live.
func (n *Node) popExpiry() { n.dropExpiry(n.expiry[0]) }

// dropExpiry takes l off the expiry heap.
func (n *Node) dropExpiry(l *Live) {
	i := l.idx
	last := len(n.expiry) - 1
	if i < 0 || i > last || n.expiry[i] != l {
		return
	}
	n.expirySwap(i, last)
	n.expiry[last] = nil
	n.expiry = n.expiry[:last]
	if i != last {
		n.expiryDown(i)
		n.expiryUp(i)
	}
	l.idx = -1
}

// OpenSession opens a session named name with ttl and the hash of its
// resume secret, delivering what concerns it to route. remote is the
// address of its client's connection, for listings.
func (n *Node) OpenSession(name string, ttl time.Duration, secretHash [SecretHashLen]byte, remote string,
	route Route) (*Live, Result, Pending) {
	return n.OpenSessionAs("", name, ttl, secretHash, remote, route)
}

// OpenSessionAs is OpenSession for a session charged to account (see
// Command.Account).
func (n *Node) OpenSessionAs(account, name string, ttl time.Duration, secretHash [SecretHashLen]byte, remote string,
	route Route) (*Live, Result, Pending) {
	if n.rep != nil {
		res := n.propose(Command{Op: OpOpenSession, Source: name, Account: account, TTL: ttl, SecretHash: secretHash},
			&proposal{route: route, remote: remote})
		n.mu.Lock()
		l := n.lives[res.Session]
		n.mu.Unlock()
		if res.Status != StatusOK {
			l = nil
		}
		return l, res, nil
	}
	var d deliveries
	n.mu.Lock()
	now := n.now()
	ns := now.UnixNano()
	n.expireDue(ns, &d)
	c := Command{Op: OpOpenSession, At: now, Source: name, Account: account, TTL: ttl, SecretHash: secretHash}
	res, p := n.applyLocked(&c, &d)
	var l *Live
	if res.Status == StatusOK {
		l = n.lives[res.Session]
		l.route, l.remote = route, remote
	}
	n.arm(ns)
	n.mu.Unlock()
	d.run()
	return l, res, p
}

// Resume hands session id to a new connection, when secretHash matches
// (compared in constant time) and, unless account is empty, the session
// was opened with that account. Under the node's lock it calls attach with
// the session's state, the route attached so far (nil when none) and what
// was delivered while none was; attach returns the route to deliver to
// from now on, and must not block or call the node. The session's TTL
// starts again. It returns nil when the session does not exist, the
// secret is wrong or the account another, without telling which.
func (n *Node) Resume(id uint64, secretHash [SecretHashLen]byte, account, remote string,
	attach func(st SessionState, old Route, missed []Output) Route) *Live {
	var d deliveries
	n.mu.Lock()
	now := n.now()
	ns := now.UnixNano()
	if n.rep == nil {
		n.expireDue(ns, &d)
	}
	l := n.lives[id]
	var st SessionState
	ok := l != nil && (n.rep == nil || n.leader)
	if ok {
		st, ok = n.t.sessionState(id, ns)
	}
	if ok && (subtle.ConstantTimeCompare(st.SecretHash[:], secretHash[:]) != 1 || account != "" && st.Account != account) {
		ok = false
	}
	if ok {
		l.route = attach(st, l.route, l.mailbox)
		l.mailbox, l.remote = nil, remote
		l.lastSeen.Store(ns)
		n.resumes++
		d.addRoute(l.route)
	} else {
		l = nil
	}
	n.arm(ns)
	n.mu.Unlock()
	d.run()
	return l
}

// SessionRoute returns the route attached to session id, for a caller
// that must settle with it before a Resume (say, stop the connection it
// delivers to): it checks secretHash and account as Resume does, and
// reports false where Resume would fail. It changes nothing.
func (n *Node) SessionRoute(id uint64, secretHash [SecretHashLen]byte, account string) (Route, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.lives[id]
	if l == nil || n.rep != nil && !n.leader {
		return nil, false
	}
	s := n.t.sessions[id]
	if s == nil || subtle.ConstantTimeCompare(s.secret[:], secretHash[:]) != 1 || account != "" && s.account.Value() != account {
		return nil, false
	}
	return l.route, true
}

// SessionAccount returns the account session id was opened with, and
// false when there is no such session.
func (n *Node) SessionAccount(id uint64) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.t.sessions[id]
	if s == nil {
		return "", false
	}
	return s.account.Value(), true
}

// SessionName returns the name session id was opened with, and false
// when there is no such session.
func (n *Node) SessionName(id uint64) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.t.sessions[id]
	if s == nil {
		return "", false
	}
	return s.name.Value(), true
}

// SetRemote records the address of session id's connection, for
// listings; empty while none is attached.
func (n *Node) SetRemote(id uint64, remote string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.lives[id]; l != nil {
		l.remote = remote
	}
}

// expireDue expires every session whose TTL has passed at now.
func (n *Node) expireDue(now int64, d *deliveries) {
	for len(n.expiry) > 0 && n.expiry[0].deadline <= now {
		l := n.expiry[0]
		if due := l.lastSeen.Load() + l.ttl; due > now {
			l.deadline = due
			n.expiryDown(0)
			continue
		}
		n.applyLocked(&Command{Op: OpExpireSession, At: time.Unix(0, now), Session: l.id}, d)
		if n.lives[l.id] == l { // not ended by the command: it did not exist
			n.removeLive(l)
		}
	}
}

// --- time ---

// arm sets the timer for the earliest of the table's next deadline and
// the next session expiry, unless it is set for then or earlier.
func (n *Node) arm(now int64) {
	if n.closed || n.rep != nil && !n.leader {
		return
	}
	var next int64
	if at, ok := n.t.NextDeadline(); ok {
		next = at.UnixNano()
	}
	if len(n.expiry) > 0 && (next == 0 || n.expiry[0].deadline < next) {
		next = n.expiry[0].deadline
	}
	if next == 0 || n.armed != 0 && n.armed <= next {
		return
	}
	n.armed = next
	wait := time.Duration(max(next-now, 0))
	if n.timer == nil {
		n.timer = time.AfterFunc(wait, n.fire)
	} else {
		n.timer.Reset(wait)
	}
}

// Advance does at once what the node's timer does when it fires: it
// expires the sessions whose TTL has passed at the node's clock and
// applies a tick when a deadline is due. A test whose clock it moves by
// hand calls it after each move.
func (n *Node) Advance() { n.fire() }

// fire is the timer: it expires sessions and applies a tick when one is
// due, then sets the timer again.
func (n *Node) fire() {
	if n.rep != nil {
		n.fireReplicated()
		return
	}
	var d deliveries
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.armed = 0
	now := n.now()
	ns := now.UnixNano()
	n.expireDue(ns, &d)
	if at, ok := n.t.NextDeadline(); ok && at.UnixNano() <= ns {
		n.applyLocked(&Command{Op: OpTick, At: now}, &d)
	}
	n.arm(ns)
	n.mu.Unlock()
	d.run()
}

// --- expiry heap ---

func (n *Node) expirySwap(i, j int) {
	h := n.expiry
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (n *Node) expiryUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if n.expiry[p].deadline <= n.expiry[i].deadline {
			return
		}
		n.expirySwap(i, p)
		i = p
	}
}

func (n *Node) expiryDown(i int) {
	h := n.expiry
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].deadline < h[l].deadline {
			m = r
		}
		if h[i].deadline <= h[m].deadline {
			return
		}
		n.expirySwap(i, m)
		i = m
	}
}

// --- reading ---

// Snapshot copies the table's holders, sessions and counters at one
// instant. It costs O(keys + sessions) and holds the node's lock for the
// copy only.
func (n *Node) Snapshot() Snapshot {
	n.mu.Lock()
	now := n.now()
	s := n.t.snapshot(now)
	s.Counters.Resumes = n.resumes
	for i := range n.refusals {
		s.Counters.Refusals[i] += n.refusals[i].Load()
	}
	ns := now.UnixNano()
	for i := range s.Sessions {
		if l := n.lives[s.Sessions[i].ID]; l != nil {
			s.Sessions[i].RemoteAddr = l.remote
			s.Sessions[i].Idle = time.Duration(max(ns-l.lastSeen.Load(), 0))
		}
	}
	n.mu.Unlock()
	return s
}

// Describe returns key's holders, queue length and lock-delay.
func (n *Node) Describe(key string) KeyInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.t.describe(key, n.now())
}

// Clone returns a copy of the table at one instant, taken under the
// node's lock: a snapshot of it that changes after the call do not reach.
func (n *Node) Clone() *Table {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.t.Clone()
}

// Export writes the table's state, as Table.Export does, under the
// node's lock.
func (n *Node) Export(f func(*Record)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.t.Export(f)
}

// Len returns the number of keys in the table.
func (n *Node) Len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.t.Len()
}

// --- v1 helpers, for in-process callers and tests ---

// Claim names the requester of a v1 lock: the key, its source and the
// remote address of its connection.
type Claim struct {
	Key        string
	Source     string
	RemoteAddr string
}

// Grant describes a v1 grant.
type Grant struct {
	Token      uint64
	Key        string
	Source     string
	RemoteAddr string
	Acquired   time.Time
}

func (c Claim) acquire(try bool) Command {
	return Command{Op: OpAcquire, Key: c.Key, Source: c.Source, RemoteAddr: c.RemoteAddr, Try: try, ConnBound: true}
}

// TryLock grants c.Key if it is free and otherwise returns ErrBusy. The
// Pending reports when the grant is durable; if it fails, Revoke it.
func (n *Node) TryLock(c Claim) (Grant, Pending, error) {
	res, p := n.Apply(c.acquire(true))
	switch res.Status {
	case StatusGranted:
		return Grant{Token: res.Token, Key: c.Key, Source: c.Source, RemoteAddr: c.RemoteAddr}, p, nil
	case StatusBusy:
		return Grant{}, nil, ErrBusy
	}
	return Grant{}, nil, refused(res.Status)
}

// Lock blocks until c.Key is granted and durable, or ctx ends; then the
// request is withdrawn (or the grant that raced it undone) and ctx's
// error returned. A request whose ctx has ended is withdrawn before any
// command would grant it the key (ApplyWatched). A journal failure undoes
// the grant and returns an error wrapping ErrJournal.
func (n *Node) Lock(ctx context.Context, c Claim) (Grant, error) {
	type outcome struct {
		ev Event
		p  Pending
	}
	got := make(chan outcome, 1)
	var gone func() bool
	if ctx.Done() != nil {
		// A caller that gave up is withdrawn before the key is passed on
		// to it.
		gone = func() bool { return ctx.Err() != nil }
	}
	res, p := n.ApplyWatched(c.acquire(false), func(ev Event, p Pending) { got <- outcome{ev, p} }, gone)
	g := Grant{Key: c.Key, Source: c.Source, RemoteAddr: c.RemoteAddr}
	switch res.Status {
	case StatusGranted:
		g.Token = res.Token
	case StatusParked:
		select {
		case o := <-got:
			if o.ev.Kind != EventGranted {
				if err := ctx.Err(); err != nil {
					return Grant{}, err // withdrawn as it gave up
				}
				return Grant{}, ErrWithdrawn
			}
			g.Token, p = o.ev.Token, o.p
		case <-ctx.Done():
			if r, _ := n.Apply(Command{Op: OpCancel, Ticket: res.Ticket}); r.Status != StatusOK {
				if o := <-got; o.ev.Kind == EventGranted {
					n.Revoke(c.Key, o.ev.Token)
				}
			}
			return Grant{}, ctx.Err()
		}
	default:
		return Grant{}, refused(res.Status)
	}
	if err := WaitPending(p); err != nil {
		n.Revoke(c.Key, g.Token)
		return Grant{}, err
	}
	return g, nil
}

// Release releases the v1 holder of key (ErrRefused when a session holds
// it); a free key is fine. The Pending reports when it is durable.
func (n *Node) Release(key string) (Pending, error) {
	res, p := n.Apply(Command{Op: OpRelease, Key: key})
	if res.Status != StatusOK {
		return nil, refused(res.Status)
	}
	return p, nil
}

// Revoke undoes the grant token of key, if it is still in force.
func (n *Node) Revoke(key string, token uint64) Pending {
	_, p := n.Apply(Command{Op: OpRevoke, Key: key, Token: token})
	return p
}

// ResetKey takes key from every holder.
func (n *Node) ResetKey(key string) Pending {
	_, p := n.Apply(Command{Op: OpResetKey, Key: key})
	return p
}

// ResetSource releases every lock of source and withdraws its requests.
func (n *Node) ResetSource(source string) Pending {
	_, p := n.Apply(Command{Op: OpResetSource, Source: source})
	return p
}

// Holder returns the first holder of key, if any.
func (n *Node) Holder(key string) (Holder, bool) {
	info := n.Describe(key)
	if len(info.Holders) == 0 {
		return Holder{}, false
	}
	return info.Holders[0], true
}

// StatusError is a refusal by the table; errors.Is(err, ErrRefused)
// holds.
type StatusError struct{ Status Status }

func (e *StatusError) Error() string        { return "mutex: refused: " + e.Status.String() }
func (e *StatusError) Is(target error) bool { return target == ErrRefused }

func refused(s Status) error { return &StatusError{Status: s} }
