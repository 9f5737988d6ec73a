package mutex

import (
	"time"
)

// Op names what a Command does to the table.
type Op uint8

// The commands of the lock table. Their numbers are part of the
// write-ahead log's format only through their names (see Op.String);
// never reuse a name.
const (
	// OpAcquire asks for Key: granted at once, parked in the key's queue,
	// or refused. Session 0 is a v1 request.
	OpAcquire Op = iota + 1
	// OpRelease ends a lock. With a Session, the lock of Token in that
	// session; with Session 0 and Token 0, the v1 holder of Key, whoever
	// it is (a key held by a session is refused with StatusNotOwned), as
	// long as its grant is older than Before (StatusStale otherwise).
	// With Lapse, a session's lock ends as its lease running out would.
	OpRelease
	// OpRenew extends the lease of the lock Token of Key held by Session,
	// by Lease or, when zero, by the lease its acquire asked for.
	OpRenew
	// OpCancel withdraws a parked request: with Session, the request
	// Target of that session; with Session 0, the v1 request of Ticket
	// (a session's request is not found by its ticket).
	OpCancel
	// OpRevoke undoes the grant Token of Key: a grant whose answer could
	// not be delivered or made durable. No lock-delay follows.
	OpRevoke
	// OpResetKey takes Key from every holder granted before Before; the
	// queue keeps its order, and a lock-delay on the key ends.
	OpResetKey
	// OpResetSource releases every lock of Source granted before Before
	// and withdraws every parked request of Source.
	OpResetSource
	// OpOpenSession opens a session named Source with TTL and SecretHash;
	// the result carries its id.
	OpOpenSession
	// OpCloseSession ends Session at its client's request: its locks are
	// released (no lock-delay), its parked requests withdrawn.
	OpCloseSession
	// OpExpireSession ends Session whose TTL passed: its locks are lost
	// (with their lock-delays), its parked requests withdrawn.
	OpExpireSession
	// OpTick applies every deadline due at At: leases that ran out,
	// lock-delays that ended, waits that timed out.
	OpTick
	// OpRestart starts a new run of the server on a table read back from
	// a journal (or a new leader's term): parked requests bound to a
	// connection (ConnBound) are withdrawn, and leases and lock-delays start
	// again from At. The node passes the floor of its fencing tokens in
	// Floor.
	OpRestart
)

var opNames = [...]string{
	OpAcquire:       "acquire",
	OpRelease:       "release",
	OpRenew:         "renew",
	OpCancel:        "cancel",
	OpRevoke:        "revoke",
	OpResetKey:      "reset-key",
	OpResetSource:   "reset-source",
	OpOpenSession:   "open-session",
	OpCloseSession:  "close-session",
	OpExpireSession: "expire-session",
	OpTick:          "tick",
	OpRestart:       "restart",
}

// String returns the op's name, as the write-ahead log writes it.
func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "unknown"
}

// ParseOp returns the Op named s, and false for a name it does not know.
func ParseOp(s string) (Op, bool) {
	for i, n := range opNames {
		if n == s && n != "" {
			return Op(i), true
		}
	}
	return 0, false
}

// Mode is how a lock shares its key.
type Mode uint8

const (
	// Exclusive: one holder at a time (or up to Limit, a semaphore).
	Exclusive Mode = iota
	// Shared: any number of shared holders at once, none exclusive.
	Shared
)

// String returns "exclusive" or "shared".
func (m Mode) String() string {
	if m == Shared {
		return "shared"
	}
	return "exclusive"
}

// MaxLockDelay caps Command.Delay.
const MaxLockDelay = 60 * time.Second

// SecretHashLen is the size of Command.SecretHash: a SHA-256 digest.
const SecretHashLen = 32

// Command is one change to the table. Which fields matter depends on Op;
// the rest stay zero. At is when the command applies: the table reads no
// clock, so every command carries its time, and applying the same
// commands in the same order to two empty tables gives the same table.
type Command struct {
	Op Op
	At time.Time // the node's clock; only its Unix nanoseconds are used

	Key        string // 1..MaxKeyLen bytes
	Source     string // acquire by v1: owner name; reset by source; session name
	RemoteAddr string // acquire: peer ip:port
	// Account is who is charged for the locks and parked requests of a v1
	// acquire or of a session being opened, for MaxHeld and MaxParked: the
	// authenticated principal, or the client's IP address. Empty: nobody.
	Account string

	Session uint64 // the session of the command; 0 for v1
	Request uint64 // the client's request id within Session (increasing)
	Target  uint64 // cancel: the request id of the acquire to withdraw
	Ticket  uint64 // cancel: the table's id of a parked request
	Token   uint64 // release, renew, revoke: the lock's fencing token
	// Before bounds a v1 release, a reset by key and a reset by source
	// to the grants that existed when the node received the request: it
	// takes only locks whose fencing token is below Before, so that a
	// request committed late (delayed in a paused leader, in flight
	// through a failover) cannot end a grant made after it. The node sets
	// it (Node.stamp) to its table's last fencing token plus one. 0: no
	// bound (commands journalled before the field existed).
	Before uint64
	// Floor, when above the table's last fencing token, raises it before
	// the command applies: the next grant's token is above Floor. A node
	// without a journal passes its clock in Unix nanoseconds at a restart;
	// a replicated log can pass its entry's position.
	Floor uint64

	// Lapse marks a session's release of a lock that its client gave up
	// at its own end of the lease: the lock ends as its lease running out
	// would (ReasonLapsed: the key's lock-delay starts, whatever the
	// reentrancy count), not as a release.
	Lapse bool

	Try   bool          // acquire: never park; busy if the key cannot be had now
	Wait  time.Duration // acquire: the longest it may stay parked; 0 for ever
	Lease time.Duration // acquire, renew: the lock's own lease; 0 none
	Delay time.Duration // acquire: lock-delay if the lock is lost by expiry
	TTL   time.Duration // open session: its TTL

	Mode      Mode   // acquire: Exclusive or Shared
	Limit     uint32 // acquire: at most Limit holders (a semaphore); 0 or 1: one
	Priority  int32  // acquire: higher is served first; 0 keeps arrival order
	Reentrant bool   // acquire: a holder of Key in the same session (and Owner) counts up
	Owner     string // acquire: the owner within the session, for reentrancy
	// Note is the holder's note of a session's acquire: free text the
	// client gives (the job, the host, a link), at most MaxNoteLen bytes,
	// kept with the lock and shown wherever the lock is. The table does
	// not read it.
	Note string

	// MaxHeld and MaxParked cap what the acquire's account may have: an
	// acquire is refused with StatusOverLimit when the account's locks and
	// parked requests (each may become a lock) are already MaxHeld, or
	// when it would park and the account already has MaxParked requests
	// parked. A reentrant acquire that counts up takes no new lock and is
	// not capped. 0: no cap.
	MaxHeld, MaxParked uint32

	// ConnBound marks an acquire whose waiting is tied to one connection
	// (v1, HTTP): a restart withdraws it.
	ConnBound bool

	SecretHash [SecretHashLen]byte // open session: SHA-256 of the resume secret

	// Proposer and Proposal name a command that a node proposed to a
	// replicated log, so that the node knows its own when it applies. The
	// table ignores them.
	Proposer, Proposal uint64
}

// grantedBefore reports whether the grant of token is one that c, a v1
// release or a reset, may end (Command.Before).
func (c *Command) grantedBefore(token uint64) bool { return c.Before == 0 || token < c.Before }

// unixNano returns c.At in Unix nanoseconds.
func (c *Command) unixNano() int64 { return c.At.UnixNano() }

// Status says how a command went.
type Status uint8

const (
	// StatusOK: done (release, renew, cancel, reset, session change).
	StatusOK Status = iota
	// StatusGranted: the acquire holds the key now; Result.Token is its
	// fencing token.
	StatusGranted
	// StatusParked: the acquire waits in the key's queue; Result.Ticket
	// names it. A later EventGranted or EventWithdrawn ends the wait.
	StatusParked
	// StatusBusy: a try found the key held (or in lock-delay).
	StatusBusy
	// StatusStale: no lock of that token (and session) holds the key.
	StatusStale
	// StatusDuplicate: the request id is not above the session's highest.
	StatusDuplicate
	// StatusNotOwned: a v1 release of a key that a session holds.
	StatusNotOwned
	// StatusNoSession: the session does not exist (closed, expired, never).
	StatusNoSession
	// StatusNotParked: a cancel of a request that is not waiting.
	StatusNotParked
	// StatusDeadlock: parking the acquire would close a cycle of waits.
	StatusDeadlock
	// StatusLimitMismatch: the acquire's Limit differs from the key's.
	StatusLimitMismatch
	// StatusUpgrade: a shared holder asked for the key exclusively.
	StatusUpgrade
	// StatusInvalid: a field of the command is out of range.
	StatusInvalid
	// StatusUnavailable: a replicated node did not commit the command: it
	// is not the leader, or the cluster has no quorum. Nothing changed.
	StatusUnavailable
	// StatusOverLimit: the acquire's account has as many locks or parked
	// requests as Command.MaxHeld or MaxParked allow. Nothing changed.
	StatusOverLimit
)

var statusNames = [...]string{
	StatusOK:            "ok",
	StatusGranted:       "granted",
	StatusParked:        "parked",
	StatusBusy:          "busy",
	StatusStale:         "stale token",
	StatusDuplicate:     "duplicate request",
	StatusNotOwned:      "held by a session",
	StatusNoSession:     "no such session",
	StatusNotParked:     "not waiting",
	StatusDeadlock:      "deadlock",
	StatusLimitMismatch: "limit mismatch",
	StatusUpgrade:       "upgrade refused",
	StatusInvalid:       "invalid",
	StatusUnavailable:   "unavailable",
	StatusOverLimit:     "over limit",
}

// String names the status.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// Result is the outcome of one command for its caller.
type Result struct {
	Status  Status
	Token   uint64        // granted: the lock's token; release: the token released
	Ticket  uint64        // parked: the table's id of the request
	Session uint64        // open session: its id
	Count   uint32        // granted, release: the reentrancy count now
	Left    time.Duration // renew, granted with a lease: what is left of it
	Limit   uint32        // limit mismatch: the key's limit
	Changed bool          // the command changed the table (it must be journaled)
}

// Reason says why a request was withdrawn or a lock ended.
type Reason uint8

const (
	ReasonNone           Reason = iota
	ReasonReleased              // released by its holder
	ReasonTimeout               // the acquire's wait ran out
	ReasonCancelled             // a cancel withdrew the request
	ReasonReset                 // a reset by key or by source
	ReasonSessionClosed         // its session was closed
	ReasonSessionExpired        // its session's TTL passed
	ReasonLeaseExpired          // the lock's lease ran out
	ReasonRevoked               // the grant was undone (not delivered, not durable)
	ReasonRestart               // the server restarted and the request's connection is gone
	ReasonLapsed                // its holder gave it up at the end of its lease by the client's clock
)

var reasonNames = [...]string{
	ReasonNone:           "none",
	ReasonReleased:       "released",
	ReasonTimeout:        "timeout",
	ReasonCancelled:      "cancelled",
	ReasonReset:          "reset",
	ReasonSessionClosed:  "session closed",
	ReasonSessionExpired: "session expired",
	ReasonLeaseExpired:   "lease expired",
	ReasonRevoked:        "revoked",
	ReasonRestart:        "restart",
	ReasonLapsed:         "lapsed",
}

// String names the reason.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventGranted: a request got the key. Parked tells whether it had
	// waited (then Ticket names it); a grant at once is also the result
	// of its command.
	EventGranted EventKind = iota + 1
	// EventWithdrawn: a parked request left its queue without the key.
	EventWithdrawn
	// EventLost: a holder lost its key without releasing it (lease, session
	// expiry, reset, revoke).
	EventLost
	// EventReleased: a holder released its key.
	EventReleased
	// EventSessionEnded: a session was closed or expired.
	EventSessionEnded
	// EventDeadlock: an acquire was refused because it would deadlock.
	EventDeadlock
)

var eventNames = [...]string{
	EventGranted:      "granted",
	EventWithdrawn:    "withdrawn",
	EventLost:         "lost",
	EventReleased:     "released",
	EventSessionEnded: "session ended",
	EventDeadlock:     "deadlock",
}

// String names the event kind.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}

// Event is something the table did that someone other than the
// command's caller may need to hear of.
type Event struct {
	Kind    EventKind
	Reason  Reason
	Parked  bool   // granted: after a wait
	Key     string // empty for EventSessionEnded
	Token   uint64 // granted, lost, released
	Session uint64 // the session concerned; 0 for v1
	Request uint64 // the client's request id of the acquire
	Ticket  uint64 // the table's id of the parked request (granted after a wait, withdrawn)
	Source  string // the holder's or requester's source
	Mode    Mode
	At      time.Time     // when it happened (the command's At)
	Lease   time.Duration // granted: the lock's lease, 0 none
	Note    string        // granted: the holder's note
	// Position is, on a replicated node, the log position of the entry
	// whose apply made the event (the same on every node); 0 on a single
	// node.
	Position uint64
}

// Action names the event as the event streams (Server-Sent Events, the
// session protocol's watch) do: acquired, released, expired, reset,
// withdrawn, deadlock, or "" for an event they do not carry (a session's
// end). A lock lost to its lease (by the server's clock or, lapsed, by its
// client's) or to its session's expiry is expired; one
// undone because its grant could not be delivered or made durable is
// released.
func (ev *Event) Action() string {
	switch ev.Kind {
	case EventGranted:
		return "acquired"
	case EventReleased:
		return "released"
	case EventLost:
		switch ev.Reason {
		case ReasonLeaseExpired, ReasonSessionExpired, ReasonLapsed:
			return "expired"
		case ReasonReset:
			return "reset"
		}
		return "released"
	case EventWithdrawn:
		return "withdrawn"
	case EventDeadlock:
		return "deadlock"
	}
	return ""
}
