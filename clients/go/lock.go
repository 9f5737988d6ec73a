package lockingcenter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// Errors of the session API, beside ErrBusy, ErrFailed, ErrInvalidKey,
// ErrInvalidSource and ErrProtocol. Match them with errors.Is.
var (
	// ErrLockReleased: the lock ended because Release, or Session.Close,
	// let it go. Lock.Cause only.
	ErrLockReleased = errors.New("lockingcenter: lock released")
	// ErrLockLost: the lock ended without a release. Lock.Cause wraps it
	// with the reason, when known: ErrLeaseExpired, ErrSessionExpired,
	// ErrReset, ErrSessionClosed.
	ErrLockLost = errors.New("lockingcenter: lock lost")
	// ErrLockOrphaned: Orphan was called; the server still holds the key.
	ErrLockOrphaned = errors.New("lockingcenter: lock orphaned")

	// ErrLeaseExpired: the lock's lease ran out before a Renew.
	ErrLeaseExpired = errors.New("lockingcenter: lease expired")
	// ErrSessionExpired: the session ended because the server did not
	// hear from it for its TTL, or because the client had no answer from
	// the server for the TTL less a margin and ended it itself (see
	// Session). Either way the session, its locks and its calls are over.
	ErrSessionExpired = errors.New("lockingcenter: session expired")
	// ErrReset: a reset (by key or by source) took the key or withdrew the
	// request.
	ErrReset = errors.New("lockingcenter: taken by a reset")
	// ErrSessionClosed: Session.Close was called.
	ErrSessionClosed = errors.New("lockingcenter: session closed")

	// ErrTimeout: the wait that WithWait allowed ran out on the server; the
	// request left the queue.
	ErrTimeout = errors.New("lockingcenter: the wait ran out")
	// ErrDeadlock: waiting would close a cycle of waits between sessions
	// (and owners); the request did not wait.
	ErrDeadlock = errors.New("lockingcenter: the wait would deadlock")
	// ErrLimitMismatch: the key is a semaphore of another limit than
	// WithLimit gave (a v1 lock or a plain acquire counts as limit 1). The
	// error is a *LimitMismatchError, which gives the key's limit.
	ErrLimitMismatch = errors.New("lockingcenter: the key has another limit")
	// ErrUpgrade: a shared holder of the key asked for it exclusively.
	ErrUpgrade = errors.New("lockingcenter: a shared holder cannot take the key exclusively")
	// ErrAnswerLost: the connection dropped before the answer to an
	// acquire arrived, and once resumed the session neither holds the key
	// for it nor waits for it: it was refused, or granted and lost since.
	ErrAnswerLost = errors.New("lockingcenter: the answer was lost with the connection")
	// ErrUnauthenticated: the server has authentication on and did not
	// take the session's token (WithToken): none, an unknown one, or, on a
	// resume, another principal's. The session ends.
	ErrUnauthenticated = errors.New("lockingcenter: authentication failed")
	// ErrForbidden: the token's principal may not use that key (its
	// prefixes) or do that.
	ErrForbidden = errors.New("lockingcenter: not allowed")
	// ErrRateLimited: the source sent more requests than the server's
	// per-source rate allows; nothing changed. Try again later.
	ErrRateLimited = errors.New("lockingcenter: rate limited")
	// ErrClusterNoLeader: NewSession found no node of the cluster that
	// leads: each one that answered said GOODBYE not_leader and named no
	// leader to follow, or one that could not be reached (an election
	// under way after the leader died, or a cluster without a quorum). It
	// matches ErrFailed too. Try again after a moment. (Not ErrNoLeader,
	// which is an Election's.)
	ErrClusterNoLeader = fmt.Errorf("%w: no node leads the cluster now", ErrFailed)
	// ErrOverLimit: the source holds or has waiting as many locks as the
	// server allows one source, or the server has as many connections as
	// it allows; nothing changed.
	ErrOverLimit = errors.New("lockingcenter: over the server's limit")
	// ErrInvalidOwner: an owner (WithOwner) longer than 127 bytes. Nothing
	// is sent.
	ErrInvalidOwner = errors.New("lockingcenter: owner must be at most 127 bytes")
	// ErrInvalidNote: a note (WithNote) that is not UTF-8 or is longer
	// than MaxNoteLen bytes. Nothing was sent.
	ErrInvalidNote = errors.New("lockingcenter: note must be UTF-8 of at most 1,024 bytes")
)

// endError is why a lock ended: one of the Err*Lock* sentinels, with a
// reason and words.
type endError struct {
	kind   error // ErrLockLost, ErrLockReleased, ErrLockOrphaned
	reason error // nil or a reason sentinel
	text   string
}

func (e *endError) Error() string { return e.text }
func (e *endError) Unwrap() []error {
	if e.reason == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.reason}
}

// lostError says that the lock of key was lost, for reason (a sentinel or
// nil), explained by why.
func lostError(key string, reason error, why string) error {
	return &endError{kind: ErrLockLost, reason: reason, text: fmt.Sprintf("lockingcenter: lock of %q lost: %s", key, why)}
}

// lostByCode is the end of a lock of key that a LOST frame reports.
func lostByCode(key string, code uint64) error {
	switch code {
	case codeLeaseExpired:
		return lostError(key, ErrLeaseExpired, "its lease ran out")
	case codeSessionExpired:
		return lostError(key, ErrSessionExpired, "its session expired")
	case codeReset:
		return lostError(key, ErrReset, "a reset took it")
	case codeSessionEnded:
		return lostError(key, ErrSessionClosed, "its session ended")
	}
	return lostError(key, nil, "the server took it back ("+codeName(code)+")")
}

// refusal maps a REFUSED code to the error of a request about key.
func refusal(op, key string, code uint64, message string) error {
	var sentinel error
	switch code {
	case codeBusy:
		sentinel = ErrBusy
	case codeTimeout:
		sentinel = ErrTimeout
	case codeCancelled:
		sentinel = context.Canceled
	case codeReset:
		sentinel = ErrReset
	case codeStaleToken:
		return fmt.Errorf("%s %q: %w: the server no longer holds it", op, key, ErrLockLost)
	case codeSessionEnded:
		sentinel = ErrSessionClosed
	case codeSessionExpired:
		sentinel = ErrSessionExpired
	case codeDeadlock:
		sentinel = ErrDeadlock
	case codeLimitMismatch:
		return fmt.Errorf("%s %q: %w", op, key, &LimitMismatchError{Key: key, Limit: lastNumber(message), message: message})
	case codeSlowConsumer:
		return fmt.Errorf("%s %q: %w: the server dropped it", op, key, ErrSlowConsumer)
	case codeUpgrade:
		sentinel = ErrUpgrade
	case codeForbidden:
		return fmt.Errorf("%s %q: %w: %s", op, key, ErrForbidden, message)
	case codeRateLimited:
		sentinel = ErrRateLimited
	case codeOverLimit:
		sentinel = ErrOverLimit
	default:
		return fmt.Errorf("%s %q: %w: %s: %s", op, key, ErrFailed, codeName(code), message)
	}
	return fmt.Errorf("%s %q: %w", op, key, sentinel)
}

// LimitMismatchError is the refusal of an acquire whose limit (WithLimit,
// or 1 without it) is not the limit of the key's holders and waiters.
// errors.Is(err, ErrLimitMismatch) holds.
type LimitMismatchError struct {
	Key     string
	Limit   uint32 // the key's limit, as the server's message names it; 0 when it names none
	message string
}

func (e *LimitMismatchError) Error() string {
	return fmt.Sprintf("%v (%s)", ErrLimitMismatch, e.message)
}

func (e *LimitMismatchError) Unwrap() error { return ErrLimitMismatch }

// lastNumber returns the last decimal number in s that fits a uint32, or
// 0: how a limit_mismatch message names the key's limit.
func lastNumber(s string) uint32 {
	end := len(s)
	for end > 0 && (s[end-1] < '0' || s[end-1] > '9') {
		end--
	}
	start := end
	for start > 0 && s[start-1] >= '0' && s[start-1] <= '9' {
		start--
	}
	n, err := strconv.ParseUint(s[start:end], 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}

// AcquireOption changes what Session.Acquire asks for.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	try       bool
	wait      time.Duration
	lease     time.Duration
	delay     time.Duration
	hasDelay  bool
	shared    bool
	limit     uint32
	priority  int32
	reentrant bool
	owner     string
	note      string
}

// TryOnce makes the acquire take the key only if it can be had now: it
// returns ErrBusy when the key is held, or in lock-delay, and never waits.
func TryOnce() AcquireOption { return func(o *acquireOptions) { o.try, o.wait = true, 0 } }

// WithWait bounds the wait in the key's queue by d, measured by the
// server (rounded up to whole milliseconds): when it runs out the request
// leaves the queue and Acquire returns ErrTimeout. A d of zero or less
// tries once, as TryOnce. Without it the wait lasts until the key comes
// or ctx ends.
func WithWait(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.try, o.wait = d <= 0, d }
}

// WithLease gives the lock a lease of d (whole milliseconds, rounded up):
// it ends d after its grant unless Lock.Renew extends it, whatever the
// session does. The client counts the lock lost a little before the
// server can end it (see Lock.Done).
func WithLease(d time.Duration) AcquireOption { return func(o *acquireOptions) { o.lease = d } }

// WithLockDelay sets the lock-delay: when the lock is lost because its
// session expired or its lease ran out (by the server's clock, or by the
// client's: see Lock.Done; not released), nobody gets the key
// for d, so that a holder that stalled can notice before anyone else
// writes. It is at most 60 s: the server refuses more (ErrFailed,
// bad_request); without it the server's LOCK_DELAY applies.
func WithLockDelay(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.delay, o.hasDelay = max(d, 0), true }
}

// Shared asks for the key in shared mode: any number of shared holders,
// and no exclusive one, hold it at once.
func Shared() AcquireOption { return func(o *acquireOptions) { o.shared = true } }

// WithLimit makes the key a semaphore of n exclusive holders. Every
// acquire of the key must name the same n, else ErrLimitMismatch; 0 or 1
// means one holder. Not with Shared.
func WithLimit(n uint32) AcquireOption { return func(o *acquireOptions) { o.limit = n } }

// WithPriority places the request in the key's queue by p: higher is
// served first, equal in order of arrival; 0 by default.
func WithPriority(p int32) AcquireOption { return func(o *acquireOptions) { o.priority = p } }

// Reentrant lets a holder of the key in this session (with the same
// owner, see WithOwner) take it again: the acquire returns at once with
// the same token and the server counts up; each Release counts down.
// A reentrant acquire without WithOwner takes the session's one shared
// owner. Without Reentrant, a second acquire of a key the session holds
// with the same owner would wait for itself and is refused with
// ErrDeadlock; with another owner it waits behind the held lock.
func Reentrant() AcquireOption { return func(o *acquireOptions) { o.reentrant = true } }

// WithOwner names who within the session asks (at most 127 bytes), for
// reentrancy and deadlock detection: two owners of one session are two
// waiters. Without it (and without Reentrant) every acquire is an owner
// of its own ("acquire-N", N its request id), as if it came from a
// client of its own: goroutines sharing one session queue for a key in
// arrival order, and a goroutine that asks again for a key it holds
// waits, as with a sync.Mutex. The server finds cycles of waits
// (ErrDeadlock) between owners, so give the acquires of one task one
// owner (a job or request id) to have its deadlocks found and to make
// them reentrant with each other.
func WithOwner(owner string) AcquireOption { return func(o *acquireOptions) { o.owner = owner } }

// WithNote gives the lock a holder's note: free text (UTF-8, at most
// MaxNoteLen bytes) that says who holds the key and why, such as the job,
// the host and a link to the run. The server keeps it with the lock (in
// its write-ahead log and a cluster's log) and shows it wherever the lock
// is shown: Describe (KeyHolder.Note), the events of its grant
// (Event.Note), lc-cli keys -d, the HTTP API and the status page. It is
// not secret: anyone who may list the key reads it. A Reentrant acquire
// that counts up keeps the note of the lock's first acquire.
func WithNote(note string) AcquireOption { return func(o *acquireOptions) { o.note = note } }

// millis converts d to whole milliseconds, rounded up, saturating at the
// largest u32.
func millis(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	return uint32(min((d+time.Millisecond-1)/time.Millisecond, math.MaxUint32))
}

// fields returns the ACQUIRE fields of key with o.
func (o *acquireOptions) fields(key string) []field {
	fs := []field{strField(tagKey, key)}
	if o.try {
		fs = append(fs, u32Field(tagWait, 0))
	} else if o.wait > 0 {
		fs = append(fs, u32Field(tagWait, millis(o.wait)))
	}
	if o.lease > 0 {
		fs = append(fs, u32Field(tagLease, millis(o.lease)))
	}
	if o.hasDelay {
		fs = append(fs, u32Field(tagDelay, millis(o.delay)))
	}
	if o.shared {
		fs = append(fs, u8Field(tagMode, 1))
	}
	if o.limit > 0 {
		fs = append(fs, u32Field(tagLimit, o.limit))
	}
	if o.priority != 0 {
		fs = append(fs, u32Field(tagPriority, uint32(o.priority)))
	}
	if o.reentrant {
		fs = append(fs, u8Field(tagReentrant, 1))
	}
	if o.owner != "" {
		fs = append(fs, strField(tagOwner, o.owner))
	}
	if o.note != "" {
		fs = append(fs, strField(tagNote, o.note))
	}
	return fs
}

// Lock is a key held by a Session, from its grant until Release, Orphan,
// or its loss. It is not a context: cancelling the context given to
// Acquire ends the wait, never the lock. Its methods are safe for
// concurrent use.
type Lock struct {
	s      *Session
	key    string
	token  uint64
	values context.Context
	done   chan struct{}

	// Guarded by s.mu.
	h     *hold // the server's lock this one counts in; nil once ended
	cause error

	releaseOnce sync.Once
	releaseErr  error
}

// Key returns the key the lock holds.
func (l *Lock) Key() string { return l.key }

// Token returns the lock's fencing token: strictly greater than every
// token the server handed out before it, for any key. Give it to the
// resource the lock guards with every write, and have the resource refuse
// a token lower than the highest it has seen. A Reentrant acquire of a
// held key gets the token of the lock it counts in.
func (l *Lock) Token() uint64 { return l.token }

// Done is closed when the lock ends: released, orphaned, or lost. Cause
// then says which. The client closes it no later than the server can end
// the lock: at the end of its lease, counted from the grant (the
// GRANTED's arrival less 100 ms for its delivery, or the acquire's
// sending when that is later) less a margin for clock drift (a tenth of
// the lease, at least 50 ms), unless Renew extends it; and when it has
// heard nothing from the server for the session's TTL less the same
// margin, counted from the sending of the last request the server
// answered (the session ends then, see Session). A lock given up at the
// end of its lease is ended on the server by its token, before anything
// the session sends later, as its lease running out would (a RELEASE with
// lapse: the key keeps its lock-delay, WithLockDelay).
func (l *Lock) Done() <-chan struct{} { return l.done }

// Cause returns nil while the lock is held, then why it ended: an error
// matching ErrLockReleased, ErrLockOrphaned or ErrLockLost; a lost lock's
// error also matches its reason when known (ErrLeaseExpired,
// ErrSessionExpired, ErrReset, ErrSessionClosed).
func (l *Lock) Cause() error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.cause
}

// Value returns the value for key of the context given to Acquire (its
// values only: its cancellation and deadline do not reach the lock).
func (l *Lock) Value(key any) any { return l.values.Value(key) }

// Release lets the key go: Done closes at once (Cause ErrLockReleased),
// the server is told and Release waits for its answer, at most the
// session's read timeout (WithReadTimeout). It returns:
//   - nil once the server has released the lock, and for a lock that
//     Session.Close released;
//   - the lock's Cause when it had ended before: an error matching
//     ErrLockLost, with its reason when known (ErrLeaseExpired,
//     ErrSessionExpired, ErrReset, ErrSessionClosed), or ErrLockOrphaned
//     after Orphan;
//   - an error matching ErrLockLost when the server no longer held it
//     (stale_token: lost meanwhile);
//   - the session's Err when the session ended before the answer came:
//     ErrSessionExpired (expired on the server, unknown to it once
//     resumed, or ended by the client for want of an answer, see
//     Session), ErrSessionClosed (Close could not tell the server),
//     ErrProtocol, ErrUnauthenticated, or ErrFailed for another refusal
//     of the resume; the session's end ends the lock on the server too;
//   - ErrSessionExpired or ErrSessionClosed when the server refused the
//     release because the session had expired or ended, ErrRateLimited
//     when it refused it for the source's rate, ErrForbidden for a key the
//     token may not use, ErrFailed for any other refusal (not_durable,
//     say), with the server's words;
//   - when no answer came in time, an error matching
//     os.ErrDeadlineExceeded: the release stays queued and goes out when
//     the connection is back.
//
// Release is idempotent: a second call returns the first one's result
// without contacting the server.
func (l *Lock) Release() error {
	l.releaseOnce.Do(func() { l.releaseErr = l.s.release(l) })
	return l.releaseErr
}

// Renew extends the lock's lease by its length from now, on the server,
// and moves the client's end of the lock with it. A lock without a lease
// renews nothing. Errors: the lock's Cause when it has ended; an error
// matching ErrLockLost when the server no longer holds it (Done then
// closes); ctx's error when it ends first (the renewal may still happen).
func (l *Lock) Renew(ctx context.Context) error { return l.s.renew(ctx, l) }

// Orphan stops tracking the lock without releasing it: Done closes with
// ErrLockOrphaned and the server keeps the key until the session ends
// (Close, or its expiry) or the lock's lease runs out. It does nothing to
// a lock that has already ended.
func (l *Lock) Orphan() { l.s.orphan(l) }
