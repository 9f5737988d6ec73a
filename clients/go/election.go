package lockingcenter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
)

var (
	// ErrNoLeader: nobody leads the election now.
	ErrNoLeader = errors.New("lockingcenter: no leader")
	// ErrInvalidOption: an acquire option that the helper does not take
	// (Election: Shared, WithLimit, Reentrant, WithOwner; Semaphore: Shared,
	// WithLimit, Reentrant). Nothing is sent.
	ErrInvalidOption = errors.New("lockingcenter: option not allowed here")
)

// Election is a leader election on one key: the candidates of every
// session that campaign on the key queue for it, and the leader is the
// key's holder, so leadership passes in the order candidates asked (or by
// WithPriority) and ends with the leader's lock: at Resign, when its
// session ends (Close, or the server no longer hears from it for its
// TTL), or with a lease that is not renewed. The leader's identity is its
// session's name (WithSource): publish what the others need of the leader,
// an address say, there.
//
// An Election is one candidate: two Elections of one session on one key
// are two candidates, which queue as two sessions would. It is safe for
// concurrent use.
type Election struct {
	s     *Session
	key   string
	owner string
	turn  chan struct{} // one Campaign at a time

	mu   sync.Mutex
	lock *Lock // the leadership while it lasts
}

// Leader is who leads an election: the holder of its key.
type Leader struct {
	Name    string // the leader's session's name (its source)
	Session uint64 // the leader's session id; 0 when a v1 client holds the key
	Token   uint64 // the fencing token of its leadership
}

func leaderOf(h KeyHolder) Leader { return Leader{Name: h.Name, Session: h.Session, Token: h.Token} }

// NewElection returns a candidate in the election on key (1 to 127
// bytes; Campaign and Leader report an invalid one) for session s.
func NewElection(s *Session, key string) *Election {
	return &Election{s: s, key: key, owner: fmt.Sprintf("election-%016x", rand.Uint64()), turn: make(chan struct{}, 1)}
}

// Key returns the election's key.
func (e *Election) Key() string { return e.key }

// Campaign waits until this candidate leads, then returns its
// leadership: a Lock on the key whose Token fences what the leader does,
// and whose Done closes when the leadership ends (see Election). It waits
// behind the leader and earlier candidates, through reconnections, until
// ctx ends (then the candidate leaves the queue). A Campaign of a
// candidate that leads returns its Lock at once; Campaigns of one
// Election wait for each other.
//
// Options as for Session.Acquire: WithWait or TryOnce bound the wait,
// WithPriority places the candidate, WithLease and WithLockDelay shape the
// lock (a lock-delay keeps the key from the next leader for a while after
// a leader is lost, not resigned, so that it can notice first). Shared,
// WithLimit, Reentrant and WithOwner are refused with ErrInvalidOption.
//
// Errors: those of Session.Acquire (ErrBusy, ErrTimeout, ctx's error,
// the session's end) and ErrInvalidOption.
func (e *Election) Campaign(ctx context.Context, opts ...AcquireOption) (*Lock, error) {
	var o acquireOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.shared || o.limit > 1 || o.reentrant || o.owner != "" {
		return nil, fmt.Errorf("campaign %q: %w: an election holds its key alone", e.key, ErrInvalidOption)
	}
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("campaign %q: %w", e.key, ctx.Err())
	}
	defer func() { <-e.turn }()
	if l := e.leading(); l != nil {
		return l, nil
	}
	l, err := e.s.Acquire(ctx, e.key, append(slices.Clip(opts), WithOwner(e.owner))...)
	if err != nil {
		return nil, fmt.Errorf("campaign: %w", err)
	}
	e.mu.Lock()
	e.lock = l
	e.mu.Unlock()
	return l, nil
}

// leading returns the candidate's leadership while it lasts, else nil.
func (e *Election) leading() *Lock {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lock != nil {
		select {
		case <-e.lock.Done():
			e.lock = nil
		default:
		}
	}
	return e.lock
}

// Resign ends the candidate's leadership, if it leads: it releases the
// key (the next candidate leads) and waits for the server's answer, at
// most the session's read timeout. It returns nil when the server has
// released it, or when the candidate did not lead (or had lost its
// leadership already); otherwise the error of Lock.Release. A Campaign
// that waits is not affected: cancel its context.
func (e *Election) Resign() error {
	e.mu.Lock()
	l := e.lock
	e.lock = nil
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	if err := l.Release(); err != nil && !errors.Is(err, ErrLockLost) {
		return fmt.Errorf("resign %q: %w", e.key, err)
	}
	return nil
}

// Leader returns who leads now, asking the server (Session.Describe: at
// most the read timeout). Errors: ErrNoLeader when nobody holds the key,
// and those of Session.Describe.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	info, err := e.s.Describe(ctx, e.key)
	if err != nil {
		return Leader{}, err
	}
	if len(info.Holders) == 0 {
		return Leader{}, fmt.Errorf("leader of %q: %w", e.key, ErrNoLeader)
	}
	return leaderOf(info.Holders[0]), nil
}

// Observe follows the election: the channel delivers who leads when the
// server has confirmed the watch (the zero Leader when nobody does), then
// every change, as it happens: a new leader, or the zero Leader when the
// leader's lock ended and nobody took the key (during a lock-delay, say).
// A leadership handed on at once to the next candidate is reported as
// the new leader alone. It is built on Session.Watch of the key, and
// checked against Session.Describe when the leader goes and after a
// reconnection, so it never reports a leader the server has not had, nor
// misses the last change, and each value differs from the one before.
//
// The channel is closed when ctx ends, when the session ends, or when the
// watch is dropped (ErrSlowConsumer: 10,000 values not taken, or the
// session fell 10,000 frames behind on the server); Observe again to go
// on. Take the values promptly.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	o := &observer{s: e.s, key: e.key, box: newOutbox[Leader](maxWatchBacklog)}
	s := e.s
	s.mu.Lock()
	if s.err != nil || ctx.Err() != nil || e.key == "" || len(e.key) > MaxKeyLen {
		s.mu.Unlock()
		o.box.stop()
		return o.box.ch
	}
	o.w = s.startWatch(e.key, o)
	o.stopCancel = context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.endWatch(o.w, ctx.Err())
		s.mu.Unlock()
		o.box.stop()
	})
	s.mu.Unlock()
	return o.box.ch
}

// observer turns the events of an election's key into its leaders. Its
// methods run with s.mu held, in the order of the session's frames, so
// the answer to a DESCRIBE comes after every event that the server had
// queued before it read the key.
type observer struct {
	s   *Session
	w   *watcher
	key string
	box *outbox[Leader]

	stopCancel func() bool // stops Observe's context.AfterFunc

	cur     Leader // the leader as the frames so far tell it
	sent    Leader // the last value delivered
	anySent bool
	ended   bool

	// A DESCRIBE in flight, and the tokens granted and ended since it was
	// sent: its answer may be older than them.
	asking, again    bool
	granted, expired map[uint64]bool
}

func (o *observer) event(ev Event) error {
	if ev.Key != o.key {
		return nil // a key that begins with the election's
	}
	switch ev.Type {
	case EventAcquired:
		o.cur = Leader{Name: ev.Name, Session: ev.Session, Token: ev.Token}
		if o.asking {
			o.granted[ev.Token] = true
		}
		return o.send(o.cur)
	case EventReleased, EventExpired, EventReset:
		if o.asking {
			o.expired[ev.Token] = true
		}
		if ev.Token == o.cur.Token {
			// Vacant, or handed on by the same change: the next event, or
			// the server's answer, tells.
			o.cur = Leader{}
			o.ask()
		}
	}
	return nil
}

func (o *observer) restarted(bool) error {
	o.ask()
	return nil
}

func (o *observer) end(err error) {
	o.ended = true
	o.box.end(err)
	if o.stopCancel != nil {
		o.stopCancel()
	}
}

// ask sends a DESCRIBE of the key, or another once the one in flight is
// answered.
func (o *observer) ask() {
	if o.asking {
		o.again = true
		return
	}
	o.asking = true
	o.granted, o.expired = map[uint64]bool{}, map[uint64]bool{}
	o.s.describe(o.key, o.info)
}

// info applies the answer to a DESCRIBE: the holder it names leads unless
// an event since told of its end or of a later leader; no holder means
// nobody leads unless a grant came since.
func (o *observer) info(k KeyInfo, err error) {
	o.asking = false
	if o.ended {
		return
	}
	if err != nil {
		o.s.endWatch(o.w, err)
		return
	}
	if len(k.Holders) > 0 {
		if h := k.Holders[0]; !o.expired[h.Token] && h.Token > o.cur.Token {
			o.cur = leaderOf(h)
		}
	} else if !o.granted[o.cur.Token] {
		o.cur = Leader{}
	}
	if o.again {
		o.again = false
		o.ask()
		return
	}
	if err := o.send(o.cur); err != nil {
		o.s.endWatch(o.w, err)
	}
}

// send delivers l unless it is the value delivered last.
func (o *observer) send(l Leader) error {
	if o.anySent && l == o.sent {
		return nil
	}
	if !o.box.put(l) {
		return fmt.Errorf("observe %q: %w: %d leaders not taken", o.key, ErrSlowConsumer, maxWatchBacklog)
	}
	o.sent, o.anySent = l, true
	return nil
}
