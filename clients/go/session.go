package lockingcenter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// SessionOption configures NewSession. The options of New apply too:
// WithSource names the session (its source: shown by lc-cli keys -d,
// matched by reset by source; empty lets the server use the client's IP
// address), WithConnectTimeout bounds each connect, WithTLS makes each
// connection speak TLS (over WithDialer's when both are given), and
// WithReadTimeout bounds how long the handshake (HELLO or RESUME),
// Lock.Release and Session.Close wait for the server's answer (0: until
// it comes or the session ends). Each attempt of a resume, and of
// NewSession when WithTTL is given, is bounded besides by the session's
// keepalive plus its margin (see Session), whatever these timeouts say.
type SessionOption interface{ applySession(*sessionConfig) }

type sessionConfig struct {
	name           string
	ttl            time.Duration
	connectTimeout time.Duration
	readTimeout    time.Duration
	token          string
	addrs          []string
	dial           func(ctx context.Context, network, address string) (net.Conn, error)
	tls            *tls.Config
	clock          clock
}

// applySession lets WithSource, WithConnectTimeout and WithReadTimeout
// configure a session.
func (o Option) applySession(cfg *sessionConfig) {
	c := Client{source: cfg.name, connectTimeout: cfg.connectTimeout, readTimeout: cfg.readTimeout, tls: cfg.tls}
	o(&c)
	cfg.name, cfg.connectTimeout, cfg.readTimeout, cfg.tls = c.source, c.connectTimeout, c.readTimeout, c.tls
}

type sessionOption func(*sessionConfig)

func (o sessionOption) applySession(cfg *sessionConfig) { o(cfg) }

// WithTTL asks for a session TTL of d (whole milliseconds, rounded up):
// how long the server keeps the session, and its locks, without hearing
// from the client. The server clamps it to its range (1 s to 5 min by
// default); zero or less takes the server's default (10 s).
func WithTTL(d time.Duration) SessionOption {
	return sessionOption(func(c *sessionConfig) { c.ttl = d })
}

// WithToken gives the session a token (an API key) for a server with
// authentication on: HELLO and every RESUME carry it. A server without
// authentication ignores it. At most 1,024 bytes.
func WithToken(token string) SessionOption {
	return sessionOption(func(c *sessionConfig) { c.token = token })
}

// maxCredential is the longest token the credential field carries.
const maxCredential = 1024

// credential adds the session's token to fields, when it has one.
func (s *Session) credential(fields []field) []field {
	if s.cfg.token != "" {
		fields = append(fields, strField(tagCredential, s.cfg.token))
	}
	return fields
}

// WithAddresses gives the session more addresses ("host:port") of the
// same service: the other nodes of a cluster. NewSession and every
// resume try them after the address given to NewSession, in turn; a node
// that answers GOODBYE not_leader with the leader's address sends the
// session there first. The address of NewSession may also be a comma
// list ("n1:22119,n2:22119,n3:22119"), with the same meaning.
func WithAddresses(addrs ...string) SessionOption {
	return sessionOption(func(c *sessionConfig) { c.addrs = append(c.addrs, addrs...) })
}

// WithDialer makes the session connect with dial instead of a
// net.Dialer, for every connection it opens (the first and each resume).
func WithDialer(dial func(ctx context.Context, network, address string) (net.Conn, error)) SessionOption {
	return sessionOption(func(c *sessionConfig) { c.dial = dial })
}

// tlsDial returns dial followed by a TLS handshake with cfg, within the
// same context; the host of the address verifies the server when
// cfg.ServerName is empty.
func tlsDial(dial func(ctx context.Context, network, address string) (net.Conn, error),
	cfg *tls.Config) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		nc, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		c := cfg
		if c.ServerName == "" {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				host = address
			}
			c = cfg.Clone()
			c.ServerName = host
		}
		tc := tls.Client(nc, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		return tc, nil
	}
}

// clock is where a session reads the time and sets the timers of its own
// deadlines (lock loss, keepalive, reconnect backoff). Socket deadlines
// and the read timeout of Release and Close use the system's clock.
type clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Session is one session of the session protocol (v2) with a
// Locking-Center server: one TCP connection, kept open, that carries
// every lock the session takes. The server keeps the session while it
// hears from the client; the session pings when it has nothing else to
// say, and when the connection drops it reconnects and resumes, locks and
// waiting requests intact, within the TTL. A connection that brings
// nothing for the server's keepalive (a third of the TTL) plus a margin
// (a tenth of the keepalive, at least 250 ms) counts as dropped: its node
// goes to the back of the addresses, and is neither tried nor followed as
// the leader for as long again. Create it with NewSession, end it with
// Close. It is safe for concurrent use.
//
// A session that has had no answer from the server for its TTL less a
// margin (a tenth of the TTL, at least 50 ms), counted from the sending of
// the last request the server answered, ends on the client, whether or
// not it is connected: the server may expire it from then on. Err then
// matches ErrSessionExpired, Done is closed, every lock is lost with
// ErrSessionExpired, and every call, waiting or later, fails with
// ErrSessionExpired; nothing of the session is sent again. Take a new
// session to go on. The client then closes the ended session on the
// server, best effort: it tries the addresses, as a resume does, until a
// server answers or Close (which waits for the attempt under way), and
// sends the server a RESUME and a CLOSE, so that the locks and waiting
// requests the server still keeps for it are freed at once. When that
// fails the server ends them with the session's TTL.
type Session struct {
	addr  string   // as given to NewSession, for messages
	addrs []string // every address to try, in turn; at least one
	cfg   sessionConfig
	clk   clock

	// From the WELCOME of the HELLO.
	id        uint64
	secret    []byte
	ttl       time.Duration
	keepalive time.Duration

	ctx      context.Context // ends at Close: cuts a reconnect under way
	cancel   context.CancelFunc
	wake     chan struct{} // pokes the loop
	quit     chan struct{} // closed by Close
	done     chan struct{} // closed when the session has ended
	loopDone chan struct{}
	readers  sync.WaitGroup

	closeOnce sync.Once
	closeErr  error // written by the loop before loopDone closes

	mu        sync.Mutex
	at        int                 // index in addrs of the address to try next
	leader    string              // the leader a GOODBYE not_leader named; "" when none
	silent    string              // the address whose connection last went silent
	shunUntil time.Time           // until then, silent is neither followed nor tried (see demote)
	conn      *sconn              // attached connection; nil while none is
	heard     time.Time           // when conn last delivered a frame (or was attached)
	out       []byte              // frames for conn, written by the loop
	nextID    uint64              // the last request id used
	inflight  map[uint64]*request // by id: sent or to send, not answered
	holds     map[uint64]*hold    // by token: the locks of the session
	letGo     map[uint64]bool     // tokens left to the server: orphaned
	watchers  map[*watcher]bool   // the watches that go on
	watchIDs  map[uint64]*watcher // by the id of every WATCH the server may still stream for
	unwatch   map[uint64]uint64   // CANCEL id to the WATCH id it ends
	lastAck   time.Time           // when the latest request the server answered was sent
	lostArmed bool
	lostStop  func() bool
	ping      *request     // the PING in flight
	replay    *resumeState // between a resume's WELCOME and the answer to its PING
	err       error        // why the session ended
	farewell  bool         // the session ended by the client's count: CLOSE it on the server
	parting   []frame      // farewell: a RELEASE with lapse of each lock the session held
}

// sconn is one connection of a session.
type sconn struct {
	addr string // the address dialled
	nc   net.Conn
	fr   *frameReader
	dead chan struct{} // closed when its reader has returned
}

// request is one request of the session, from its sending until its
// answer.
type request struct {
	typ    byte
	id     uint64
	frame  []byte    // its bytes, to send again after a drop
	sentAt time.Time // the session's clock when it was queued
	sent   bool      // queued on a connection: it may have arrived
	resent bool      // sent again after a resume
	result chan result

	key       string               // acquire, release, renew
	opts      *acquireOptions      // acquire
	values    context.Context      // acquire
	abandoned bool                 // acquire: its caller has gone
	target    uint64               // cancel
	lock      *Lock                // release, renew
	token     uint64               // release, renew
	onInfo    func(KeyInfo, error) // describe: called with s.mu held instead of result
}

type result struct {
	lock *Lock
	info KeyInfo // describe
	err  error
}

// hold is one lock the server holds for the session, with the Locks that
// count in it (more than one after Reentrant acquires).
type hold struct {
	key   string
	token uint64
	locks []*Lock
	stop  func() bool // the lease timer
	gen   int
}

// resumeState is what a resume's WELCOME said, kept until the answer to
// the PING sent right after the RESUME: every frame the server owed the
// session comes before that answer.
type resumeState struct {
	sentAt  time.Time // when the RESUME was sent
	syncID  uint64    // the PING's id
	applied uint64
	held    map[uint64]heldItem // by token
	byReq   map[uint64]uint64   // acquire id to token
	parked  map[uint64]bool     // acquire ids still waiting
	fresh   map[uint64]bool     // tokens granted after the resume
}

type heldItem struct {
	key     string
	request uint64
	count   uint32
	left    time.Duration
	leased  bool
}

// NewSession connects to the mutex port at addr ("host:port", or a comma
// list of the nodes of a cluster) and opens a session, within ctx.
// Options: WithSource, WithConnectTimeout, WithReadTimeout, WithTTL,
// WithAddresses, WithDialer. With several addresses it tries each once, in
// turn, and follows a node that names the leader (GOODBYE not_leader), so
// it opens the session at the leader; it fails when none took it. Errors:
// ErrInvalidSource, a network error, or an error matching ErrFailed when
// the server refused the session (from every address: the last one's),
// ErrClusterNoLeader among them when the nodes know no leader to send it
// to, or only one that cannot be reached (an election: try again).
func NewSession(ctx context.Context, addr string, opts ...SessionOption) (*Session, error) {
	cfg := sessionConfig{connectTimeout: DefaultConnectTimeout, readTimeout: DefaultReadTimeout}
	for _, o := range opts {
		o.applySession(&cfg)
	}
	if len(cfg.name) > MaxSourceLen {
		return nil, fmt.Errorf("session at %s: %w", addr, ErrInvalidSource)
	}
	if len(cfg.token) > maxCredential {
		return nil, fmt.Errorf("session at %s: a token over %d bytes", addr, maxCredential)
	}
	if cfg.dial == nil {
		var d net.Dialer
		cfg.dial = d.DialContext
	}
	if cfg.tls != nil {
		cfg.dial = tlsDial(cfg.dial, cfg.tls)
	}
	if cfg.clock == nil {
		cfg.clock = systemClock{}
	}
	addrs := sessionAddresses(addr, cfg.addrs)
	if len(addrs) == 0 {
		return nil, fmt.Errorf("session at %q: no address", addr)
	}
	s := &Session{
		addr: addr, addrs: addrs, cfg: cfg, clk: cfg.clock,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		loopDone: make(chan struct{}),
		inflight: make(map[uint64]*request), holds: make(map[uint64]*hold), letGo: make(map[uint64]bool),
		watchers: make(map[*watcher]bool), watchIDs: make(map[uint64]*watcher), unwatch: make(map[uint64]uint64),
	}
	hello := s.credential([]field{strField(tagName, cfg.name)})
	if cfg.ttl > 0 {
		hello = append(hello, u32Field(tagTTL, millis(cfg.ttl)))
	}
	s.nextID = 1
	sentAt := s.clk.Now()
	// The keepalive is known from the WELCOME only; a TTL asked for gives
	// it beforehand, and with it the bound of each attempt.
	bound := time.Duration(0)
	if cfg.ttl > 0 {
		bound = silence(cfg.ttl / 3)
	}
	c, w, err := s.open(ctx, appendFrame([]byte(preface), frame{typ: frameHello, id: 1, fields: hello}), bound)
	if err != nil {
		return nil, fmt.Errorf("session at %s: %w", addr, err)
	}
	id, okID := w.uint(tagSession)
	secret, okSecret := w.get(tagSecret)
	ttl, okTTL := w.uint(tagTTL)
	keepalive, _ := w.uint(tagKeepalive)
	if !okID || !okSecret || !okTTL || ttl == 0 {
		c.nc.Close()
		return nil, fmt.Errorf("session at %s: %w: a WELCOME without a session, secret or TTL", addr, ErrProtocol)
	}
	s.id, s.secret = id, append([]byte(nil), secret...)
	s.ttl = time.Duration(ttl) * time.Millisecond
	s.keepalive = time.Duration(keepalive) * time.Millisecond
	if s.keepalive <= 0 || s.keepalive > s.ttl {
		s.keepalive = s.ttl / 3
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mu.Lock()
	s.lastAck = sentAt
	s.conn, s.heard = c, s.clk.Now()
	s.armLost()
	s.mu.Unlock()
	s.startReader(c)
	go s.run(c)
	return s, nil
}

// sessionAddresses returns the addresses of addr (a comma list) and
// more, blanks dropped, each once, in order.
func sessionAddresses(addr string, more []string) []string {
	var out []string
	for _, a := range append(strings.Split(addr, ","), more...) {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// open sends the HELLO b to each address in turn, following a node that
// names the leader, until one answers WELCOME; bound, when not 0, limits
// each attempt. It gives up on an answer that another node would give
// too, and after every address has failed once. When a node answered
// not_leader and the last could not be reached (the leader it named among
// them: a leader that has just died, which the followers name until they
// elect another), the error matches ErrClusterNoLeader: the cluster is
// between leaders, and asking again soon is what helps.
func (s *Session) open(ctx context.Context, b []byte, bound time.Duration) (*sconn, *frame, error) {
	var err error
	notLeader := false
	for tries := 0; tries < 2*len(s.addrs)+1; tries++ {
		addr := s.target()
		var c *sconn
		var w *frame
		if c, w, err = s.handshake(ctx, addr, b, bound); err == nil {
			return c, w, nil
		}
		notLeader = notLeader || errors.Is(err, ErrClusterNoLeader)
		if ctx.Err() != nil || !s.failedAt(addr, err) {
			return nil, nil, err
		}
		s.mu.Lock()
		round := s.leader == "" && s.at == 0
		s.mu.Unlock()
		if round {
			break // each address once, and no leader named
		}
	}
	if g := (*goodbyeError)(nil); notLeader && !errors.As(err, &g) && !errors.Is(err, ErrFailed) && !errors.Is(err, ErrProtocol) {
		// The last node did not answer (a dial refused, a frozen node's
		// silence): no node that answered refused for a reason of its own.
		err = fmt.Errorf("%w; %w", ErrClusterNoLeader, err)
	}
	return nil, nil, err
}

// target returns the address to try next: the leader a node named, or
// the next of addrs, passing over a shunned one.
func (s *Session) target() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leader != "" {
		return s.leader
	}
	if s.shunned(s.addrs[s.at]) {
		s.at = (s.at + 1) % len(s.addrs)
	}
	return s.addrs[s.at]
}

// follow makes leader, named by a node, the next address to try, unless
// it is shunned. Called with s.mu held.
func (s *Session) follow(leader string) {
	if !s.shunned(leader) {
		s.leader = leader
	}
}

// demote sends the node at addr, whose connection went silent, to the
// back of the addresses, and shuns it for as long again as it was silent:
// it is neither tried nor followed when another node names it as the
// leader. A frozen leader keeps its TCP port (the kernel accepts) but
// answers nothing, and the other nodes go on naming it until they have
// elected another; trying it again would cost a whole handshake bound.
// With one address there is nothing else to try. Called with s.mu held.
func (s *Session) demote(addr string) {
	if s.leader == addr {
		s.leader = ""
	}
	if i := slices.Index(s.addrs, addr); i >= 0 {
		s.addrs = append(slices.Delete(s.addrs, i, i+1), addr)
		s.at = 0
	}
	s.silent, s.shunUntil = addr, s.clk.Now().Add(s.silence())
}

// shunned reports whether addr is the node that went silent lately and
// another address is there to try. Called with s.mu held.
func (s *Session) shunned(addr string) bool {
	return addr == s.silent && len(s.addrs) > 1 && s.clk.Now().Before(s.shunUntil)
}

// failedAt notes that a handshake at addr failed with err, so that the
// next try goes to the leader it named, or to the next address. It
// reports whether another node may do better: false for a refusal any
// node would give (a bad token, an expired session).
func (s *Session) failedAt(addr string, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leader == addr {
		s.leader = ""
	} else if s.addrs[s.at] == addr {
		s.at = (s.at + 1) % len(s.addrs)
	}
	g := (*goodbyeError)(nil)
	if !errors.As(err, &g) {
		return true
	}
	if g.code == codeNotLeader && g.leader != addr {
		s.follow(g.leader)
	}
	return !g.final()
}

// ID returns the session's id on the server.
func (s *Session) ID() uint64 { return s.id }

// TTL returns the session TTL the server granted.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session has ended: closed, or expired on the
// server (Err says which). Its locks have ended then too.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session lives, then why it ended: an error
// matching ErrSessionClosed after Close; ErrSessionExpired when the server
// expired it or no longer knows it, or when the client had no answer
// within the TTL less its margin (see Session); ErrProtocol;
// ErrUnauthenticated when a resume's token was refused; ErrFailed for
// another refusal of a resume that no other node would take back.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Acquire asks for key (1 to 127 bytes) in the session and waits until
// the session holds it, however long that takes, through reconnections.
// Options: TryOnce, WithWait, WithLease, WithLockDelay, Shared,
// WithLimit, WithPriority, Reentrant, WithOwner.
//
// Cancelling ctx ends the wait only: the request leaves the server's
// queue, and a grant that crossed the cancel is released; it never ends
// a lock that Acquire has returned. The lock keeps ctx's values (see
// Lock.Value).
//
// Errors, each matched with errors.Is:
//   - ErrInvalidKey, ErrInvalidOwner, ErrInvalidNote: nothing was sent;
//   - ErrBusy (TryOnce, the key is held or in lock-delay), ErrTimeout
//     (WithWait ran out), ErrDeadlock, ErrLimitMismatch, ErrUpgrade,
//     ErrReset (a reset withdrew the request), ErrForbidden,
//     ErrRateLimited, ErrOverLimit: the server refused it, with its words;
//   - ctx's error: the wait was given up (see above);
//   - ErrAnswerLost: the connection dropped before the answer, and the
//     resumed session neither holds the key for it nor waits for it (it
//     was refused, or granted and lost since, which the message says);
//   - an error matching the session's Err when the session has ended,
//     before or during the wait: ErrSessionClosed, ErrSessionExpired
//     (also when the client had no answer within the TTL less its margin,
//     see Session), ErrProtocol, ErrUnauthenticated or ErrFailed; and
//     ErrSessionExpired or ErrSessionClosed when the server refused the
//     request because the session had expired or ended;
//   - ErrFailed for any other refusal, with the server's words.
//
// It never returns ErrLockLost: a lock lost before Acquire could return it
// is ErrAnswerLost.
func (s *Session) Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Lock, error) {
	if key == "" || len(key) > MaxKeyLen {
		return nil, fmt.Errorf("acquire %q: %w", key, ErrInvalidKey)
	}
	o := &acquireOptions{}
	for _, opt := range opts {
		opt(o)
	}
	if len(o.owner) > MaxSourceLen {
		return nil, fmt.Errorf("acquire %q: %w", key, ErrInvalidOwner)
	}
	if len(o.note) > MaxNoteLen || !utf8.ValidString(o.note) {
		return nil, fmt.Errorf("acquire %q: %w", key, ErrInvalidNote)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", key, err)
	}
	r := &request{typ: frameAcquire, key: key, opts: o, values: context.WithoutCancel(ctx), result: make(chan result, 1)}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, fmt.Errorf("acquire %q: %w", key, err)
	}
	if o.owner == "" && !o.reentrant {
		// An owner of its own (see WithOwner): goroutines that share the
		// session queue for a key as clients of their own would.
		o.owner = "acquire-" + strconv.FormatUint(s.nextID+1, 10)
	}
	s.enqueue(r, o.fields(key))
	s.mu.Unlock()
	select {
	case res := <-r.result:
		return res.lock, res.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case res := <-r.result:
		if res.lock != nil { // the grant crossed the cancel
			s.dropLock(res.lock, ErrLockReleased)
			s.enqueueRelease(res.lock.key, res.lock.token, nil, nil)
		}
	default:
		s.abandon(r)
	}
	s.mu.Unlock()
	return nil, fmt.Errorf("acquire %q: %w", key, ctx.Err())
}

// Close ends the session: it sends CLOSE, which releases every lock of
// the session at once (orphaned ones too) and withdraws its waiting
// requests, and waits for the answer, at most the read timeout. When
// the connection is down it first tries to resume. Locks end with
// ErrLockReleased, or, when the server could not be told, with
// ErrLockLost (the server then ends them with the session's TTL) and
// Close returns why. Waiting Acquires return ErrSessionClosed. Of a
// session that has already ended Close returns nil; when the client ended
// it (see Session), Close stops the attempts to close it on the server,
// after the one under way (at most the keepalive plus its margin). Close
// is safe to call more than once; later calls return the first's result.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		s.mu.Lock()
		farewell := s.farewell
		s.mu.Unlock()
		if !farewell {
			s.cancel() // cuts a resume under way
		}
		<-s.loopDone // after the attempt under way of a farewell
		s.cancel()
	})
	return s.closeErr
}

// --- requests ---

// enqueue gives r the next request id and queues its frame for the
// attached connection; without one, r waits in inflight for the next.
// Called with s.mu held.
func (s *Session) enqueue(r *request, fields []field) {
	s.nextID++
	r.id = s.nextID
	r.sentAt = s.clk.Now()
	r.frame = appendFrame(nil, frame{typ: r.typ, id: r.id, fields: fields})
	if r.typ != framePing {
		s.inflight[r.id] = r
	}
	if s.conn != nil {
		s.out = append(s.out, r.frame...)
		r.sent = true
		s.poke()
	}
}

// sendOnce gives a frame the next request id and queues it for the
// attached connection; without one it is not sent at all. It returns the
// id. For the frames of watches, which a resume sends anew. Called with
// s.mu held.
func (s *Session) sendOnce(typ byte, fields []field) uint64 {
	s.nextID++
	if s.conn != nil {
		s.out = appendFrame(s.out, frame{typ: typ, id: s.nextID, fields: fields})
		s.poke()
	}
	return s.nextID
}

// enqueueRelease queues a RELEASE of token; result, when not nil, hears
// the answer.
func (s *Session) enqueueRelease(key string, token uint64, l *Lock, res chan result) *request {
	r := &request{typ: frameRelease, key: key, token: token, lock: l, result: res}
	s.enqueue(r, []field{strField(tagKey, key), u64Field(tagToken, token)})
	return r
}

// enqueueLapse sends the RELEASE of a lock given up at the client's end of
// its lease: with lapse, so that the server ends it as its lease running
// out would, with the key's lock-delay, whatever its count. Nobody waits
// for the answer (stale_token when the server's lease ended first;
// unsupported from a server older than lapse, whose lease then ends the
// lock on its own, with the delay).
func (s *Session) enqueueLapse(key string, token uint64) {
	r := &request{typ: frameRelease, key: key, token: token}
	s.enqueue(r, []field{strField(tagKey, key), u64Field(tagToken, token), u8Field(tagLapse, 1)})
}

// abandon gives up an acquire whose caller has gone: one that never left
// the client is forgotten, another is cancelled on the server.
func (s *Session) abandon(r *request) {
	if s.inflight[r.id] != r {
		return
	}
	if !r.sent {
		delete(s.inflight, r.id)
		return
	}
	r.abandoned = true
	s.enqueue(&request{typ: frameCancel, target: r.id}, []field{u64Field(tagTarget, r.id)})
}

func (s *Session) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Session) release(l *Lock) error {
	s.mu.Lock()
	if l.cause != nil {
		err := l.cause
		s.mu.Unlock()
		if errors.Is(err, ErrLockReleased) {
			return nil
		}
		return err
	}
	s.dropLock(l, ErrLockReleased)
	r := s.enqueueRelease(l.key, l.token, l, make(chan result, 1))
	s.mu.Unlock()
	var timeout <-chan time.Time
	if s.cfg.readTimeout > 0 {
		t := time.NewTimer(s.cfg.readTimeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case res := <-r.result:
		return res.err
	case <-timeout:
		return fmt.Errorf("release %q at %s: no answer within %v (%w); it is sent again after a reconnect",
			l.key, s.addr, s.cfg.readTimeout, os.ErrDeadlineExceeded)
	}
}

func (s *Session) renew(ctx context.Context, l *Lock) error {
	s.mu.Lock()
	if l.cause != nil {
		err := l.cause
		s.mu.Unlock()
		return err
	}
	r := &request{typ: frameRenew, key: l.key, token: l.token, lock: l, result: make(chan result, 1)}
	s.enqueue(r, []field{strField(tagKey, l.key), u64Field(tagToken, l.token)})
	s.mu.Unlock()
	select {
	case res := <-r.result:
		return res.err
	case <-ctx.Done():
		return fmt.Errorf("renew %q: %w", l.key, ctx.Err())
	}
}

func (s *Session) orphan(l *Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.cause != nil {
		return
	}
	s.letGo[l.token] = true
	s.dropLock(l, ErrLockOrphaned)
}

// --- locks ---

// grant makes a Lock of the hold of token for the acquire r, creating
// the hold if needed; with leased, the lease ends left after from. Then
// it hands the lock to r's caller.
func (s *Session) grant(r *request, token uint64, leased bool, from time.Time, left time.Duration) {
	h := s.holds[token]
	if h == nil {
		h = &hold{key: r.key, token: token}
		s.holds[token] = h
	}
	l := &Lock{s: s, key: r.key, token: token, values: r.values, done: make(chan struct{}), h: h}
	h.locks = append(h.locks, l)
	if leased {
		s.setLease(h, from, left)
	}
	r.result <- result{lock: l}
}

// endLock ends l with cause.
func (s *Session) endLock(l *Lock, cause error) {
	if l.cause != nil {
		return
	}
	l.cause, l.h = cause, nil
	close(l.done)
}

// dropLock ends one lock of its hold; the hold goes when its last lock
// does.
func (s *Session) dropLock(l *Lock, cause error) {
	if h := l.h; h != nil {
		h.locks = slices.DeleteFunc(h.locks, func(x *Lock) bool { return x == l })
		if len(h.locks) == 0 {
			s.forgetHold(h)
		}
	}
	s.endLock(l, cause)
}

// endHold ends every lock of h with cause.
func (s *Session) endHold(h *hold, cause error) {
	s.forgetHold(h)
	for _, l := range h.locks {
		s.endLock(l, cause)
	}
	h.locks = nil
}

func (s *Session) forgetHold(h *hold) {
	if s.holds[h.token] == h {
		delete(s.holds, h.token)
	}
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// margin is what the client takes off a duration the server measures, for
// the drift between the two clocks: a tenth, at least 50 ms, at most half.
func margin(d time.Duration) time.Duration { return min(max(d/10, 50*time.Millisecond), d/2) }

// silence returns how long a connection may bring nothing before the
// session counts it dead, for the server's keepalive k: k, when the
// session's ping is due on an idle connection, plus a tenth of k, at least
// 250 ms, for the ping's round trip and a stall of the server or the
// network. It also bounds each connect and handshake of a resume, so a
// node that takes the connection and answers nothing (a frozen process:
// its kernel still accepts) costs no more than a silent connection.
func silence(k time.Duration) time.Duration { return k + max(k/10, 250*time.Millisecond) }

func (s *Session) silence() time.Duration { return silence(s.keepalive) }

// deliveryBound is the delay the session allows between the server's
// measuring of a left_ms and the reading of its frame here (the write to
// the log, the network, the reader): what a GRANTED says is left of a
// lease is counted from the frame's arrival less this bound, or from the
// sending of the request when that is later (an answer that came at once).
const deliveryBound = 100 * time.Millisecond

// measuredAt returns the earliest time at which the server can have
// measured a left_ms that arrives now in the answer to a request sent at
// sentAt. Called with s.mu held.
func (s *Session) measuredAt(sentAt time.Time) time.Time {
	now := s.clk.Now()
	if from := now.Add(-deliveryBound); from.After(sentAt) {
		return from
	}
	return sentAt
}

// setLease makes h lost at from+left, less the margin, unless a renewal
// moves it.
func (s *Session) setLease(h *hold, from time.Time, left time.Duration) {
	if h.stop != nil {
		h.stop()
	}
	h.gen++
	gen := h.gen
	end := from.Add(left - margin(left))
	h.stop = s.clk.AfterFunc(end.Sub(s.clk.Now()), func() { s.leaseDue(h, gen) })
}

// leaseDue gives h up at the client's end of its lease, and ends it on
// the server by its token with one RELEASE with lapse (enqueueLapse),
// which keeps the key's lock-delay: a plain release would let the next
// holder in while this one may still be finishing. The RELEASE goes
// before anything the session sends later, so the session's next acquire
// of the key finds it ended rather than still held by the lock given up
// (ErrDeadlock).
func (s *Session) leaseDue(h *hold, gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holds[h.token] != h || h.gen != gen {
		return
	}
	s.endHold(h, lostError(h.key, ErrLeaseExpired, "its lease ran out"))
	s.enqueueLapse(h.key, h.token)
}

// ack records that the server answered a request sent at sentAt: it had
// heard from the session then, so the session lives until sentAt + TTL at
// least.
func (s *Session) ack(sentAt time.Time) {
	if sentAt.After(s.lastAck) {
		s.lastAck = sentAt
	}
	s.armLost()
}

// armLost sets the timer of the session's lost deadline: the TTL, less the
// margin, after the last acknowledged sending.
func (s *Session) armLost() {
	if s.lostArmed || s.err != nil {
		return
	}
	s.lostArmed = true
	s.lostStop = s.clk.AfterFunc(s.lostDeadline().Sub(s.clk.Now()), s.lostDue)
}

func (s *Session) lostDeadline() time.Time { return s.lastAck.Add(s.ttl - margin(s.ttl)) }

// lostDue runs at the lost deadline: if no answer has moved it, the
// server may expire the session now, so the session ends here, as if the
// server had expired it: every lock lost, every call failed with
// ErrSessionExpired, Done closed. The loop then closes the session on the
// server, best effort (see farewell), so that what the server still holds
// for it is freed before its TTL.
func (s *Session) lostDue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostArmed = false
	if s.err != nil {
		return
	}
	if s.clk.Now().Before(s.lostDeadline()) {
		s.armLost()
		return
	}
	why := fmt.Sprintf("no answer from the server within the session's TTL (%v) less a margin of %v",
		s.ttl, margin(s.ttl))
	s.farewell = true
	// The locks held, and those whose RELEASE is still unanswered (a
	// lease given up here, a Release under way): the server may hold any.
	parting := map[uint64]string{}
	for token, h := range s.holds {
		if !s.letGo[token] {
			parting[token] = h.key
		}
	}
	for _, id := range s.inflightIDs() {
		if r := s.inflight[id]; r.typ == frameRelease {
			parting[r.token] = r.key
		}
	}
	for _, token := range slices.Sorted(maps.Keys(parting)) {
		s.parting = append(s.parting, frame{typ: frameRelease,
			fields: []field{strField(tagKey, parting[token]), u64Field(tagToken, token), u8Field(tagLapse, 1)}})
	}
	s.endLost(fmt.Errorf("%w: %s", ErrSessionExpired, why), ErrSessionExpired, why)
}

// inflightIDs returns the ids of the requests in flight, in order.
func (s *Session) inflightIDs() []uint64 {
	ids := make([]uint64, 0, len(s.inflight))
	for id := range s.inflight {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// end ends the session for err: every lock with lockCause(key), every
// request with err (a release with nil when released says the locks were
// released). Called with s.mu held.
func (s *Session) end(err error, released bool, lockCause func(key string) error) {
	if s.err != nil {
		return
	}
	s.err = err
	for _, h := range s.holds {
		s.endHold(h, lockCause(h.key))
	}
	for w := range s.watchers {
		s.endWatch(w, err)
	}
	clear(s.watchIDs)
	clear(s.unwatch)
	for id, r := range s.inflight {
		delete(s.inflight, id)
		if r.result == nil || r.abandoned {
			continue
		}
		switch {
		case r.typ == frameRelease && released:
			r.result <- result{}
		case r.typ == frameAcquire:
			r.result <- result{err: fmt.Errorf("acquire %q: %w", r.key, err)}
		default:
			r.result <- result{err: err}
		}
	}
	if s.lostStop != nil {
		s.lostStop()
	}
	if s.conn != nil {
		s.conn.nc.Close()
	}
	close(s.done)
	s.poke()
}

// endLost ends the session for err, its locks lost for reason.
func (s *Session) endLost(err, reason error, why string) {
	s.end(err, false, func(key string) error { return lostError(key, reason, why) })
}

// --- connections ---

// handshake dials, writes b (the preface and the first frames) and reads
// the first answer, within ctx, the connect timeout (the dial) and the
// read timeout (the answer), and all of it within bound when not 0. It
// returns the connection and its WELCOME, or a *goodbyeError, a network
// error or an error matching ErrProtocol.
func (s *Session) handshake(ctx context.Context, addr string, b []byte, bound time.Duration) (*sconn, *frame, error) {
	parent, limit := ctx, s.cfg.readTimeout
	if bound > 0 {
		var cancel context.CancelFunc
		parent, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
		if limit <= 0 || bound < limit {
			limit = bound
		}
	}
	dctx := parent
	if d := s.cfg.connectTimeout; d > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(parent, d)
		defer cancel()
	}
	nc, err := s.cfg.dial(dctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	// The handshake is a request that waits for no key: the read timeout
	// bounds its answer.
	actx := parent
	if d := s.cfg.readTimeout; d > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(parent, d)
		defer cancel()
	}
	if dl, ok := actx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(actx, func() { nc.Close() })
	c := &sconn{addr: addr, nc: nc, fr: &frameReader{r: nc}, dead: make(chan struct{})}
	var f *frame
	if _, err = nc.Write(b); err == nil {
		f, err = c.fr.answer()
	}
	if !stop() && err == nil {
		err = actx.Err()
	}
	if err == nil {
		nc.SetDeadline(time.Time{})
		switch f.typ {
		case frameWelcome:
			return c, f, nil
		case frameGoodbye:
			err = goodbye(f)
		case frameRefused:
			// A field of the HELLO or RESUME that the server does not
			// know (unsupported): a server older than this client.
			code, _ := f.uint(tagCode)
			msg, _ := f.get(tagMessage)
			err = fmt.Errorf("%w: the server refused the session's first frame: %s: %s", ErrFailed, codeName(code), msg)
		default:
			err = fmt.Errorf("%w: frame %#02x before the WELCOME", ErrProtocol, f.typ)
		}
	} else if actx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
		if err = ctx.Err(); err == nil {
			err = fmt.Errorf("no answer within %v: %w", limit, os.ErrDeadlineExceeded)
		}
	}
	if string(c.fr.buf[c.fr.off:]) == "-" {
		// A v1 refusal: the port does not speak the session protocol.
		err = fmt.Errorf("%w: '-' to the session protocol's preface (a server without sessions?)", ErrFailed)
	}
	nc.Close()
	return nil, nil, err
}

// goodbyeError is a GOODBYE from the server.
type goodbyeError struct {
	code    uint64
	message string
	leader  string // not_leader: the leader's address, when the node knows it
}

func goodbye(f *frame) error {
	code, _ := f.uint(tagCode)
	msg, _ := f.get(tagMessage)
	leader, _ := f.get(tagLeader)
	return &goodbyeError{code: code, message: string(msg), leader: string(leader)}
}

// Error names the sentinel, the code and the server's message; a message
// that only says again what the sentinel says is left out.
func (e *goodbyeError) Error() string {
	s := fmt.Sprintf("%v: the server said goodbye (%s)", e.Unwrap(), codeName(e.code))
	if e.message != "" && !strings.HasSuffix(e.Unwrap().Error(), e.message) {
		s += ": " + e.message
	}
	return s
}

func (e *goodbyeError) Unwrap() error {
	switch e.code {
	case codeSessionExpired, codeUnknownSession:
		return ErrSessionExpired
	case codeProtocolError:
		return ErrProtocol
	case codeUnauthenticated:
		return ErrUnauthenticated
	case codeRateLimited:
		return ErrRateLimited
	case codeOverLimit:
		return ErrOverLimit
	case codeNotLeader:
		return ErrClusterNoLeader
	}
	return ErrFailed
}

// final reports a GOODBYE after which resuming is pointless. A server
// that is stopping, over its connections or the source's rate may take
// the session back later; a node of a cluster that does not lead sends
// it to the leader.
func (e *goodbyeError) final() bool {
	switch e.code {
	case codeShuttingDown, codeSessionEnded, codeRateLimited, codeOverLimit, codeNotLeader:
		return false
	}
	return true
}

// resumeWith returns the first bytes of a resume: the preface, RESUME,
// the frames of mid, and a frame of type typ with no fields, with the next
// request ids in that order; and the id of the last frame.
func (s *Session) resumeWith(typ byte, mid ...frame) ([]byte, uint64) {
	s.mu.Lock()
	rid := s.nextID + 1
	s.nextID += uint64(2 + len(mid))
	id := s.nextID
	s.mu.Unlock()
	b := appendFrame([]byte(preface), frame{typ: frameResume, id: rid,
		fields: s.credential([]field{u64Field(tagSession, s.id), field{tagSecret, s.secret}})})
	for i, f := range mid {
		f.id = rid + 1 + uint64(i)
		b = appendFrame(b, f)
	}
	return appendFrame(b, frame{typ: typ, id: id}), id
}

// resume opens a connection and resumes the session on it: RESUME, and a
// PING whose answer comes after everything the server owed the session.
// It attaches the connection, queues again the requests the server never
// got, and starts its reader.
func (s *Session) resume(ctx context.Context) (*sconn, error) {
	b, syncID := s.resumeWith(framePing)
	sentAt := s.clk.Now()
	addr := s.target()
	c, w, err := s.handshake(ctx, addr, b, s.silence())
	if err != nil {
		s.failedAt(addr, err)
		return nil, err
	}
	rs, err := s.parseResume(w)
	if err != nil {
		c.nc.Close()
		return nil, err
	}
	rs.sentAt, rs.syncID = sentAt, syncID
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		c.nc.Close()
		return nil, s.err
	}
	s.ack(sentAt)
	s.heard = s.clk.Now()
	s.replay = rs
	var out []byte
	for _, id := range s.inflightIDs() {
		r := s.inflight[id]
		switch {
		case r.typ == frameDescribe:
			// It changes nothing: sent again, whatever became of it.
		case id <= rs.applied:
			r.frame = nil // it arrived; the reconciliation settles it
			continue
		case r.typ == frameAcquire && r.abandoned, r.typ == frameCancel && s.inflight[r.target] == nil:
			delete(s.inflight, id) // it never arrived and nobody wants it
			continue
		}
		r.resent, r.sent = r.sent, true
		out = append(out, r.frame...)
	}
	out = s.rewatch(out)
	s.conn, s.out, s.ping = c, out, nil
	s.poke()
	s.startReader(c)
	return c, nil
}

func (s *Session) parseResume(w *frame) (*resumeState, error) {
	if id, _ := w.uint(tagSession); id != s.id {
		return nil, fmt.Errorf("%w: the WELCOME of a resume names session %d", ErrProtocol, id)
	}
	rs := &resumeState{held: map[uint64]heldItem{}, byReq: map[uint64]uint64{}, parked: map[uint64]bool{},
		fresh: map[uint64]bool{}}
	rs.applied, _ = w.uint(tagApplied)
	held, err := w.items(tagHeld)
	if err != nil {
		return nil, err
	}
	for _, it := range held {
		token, _ := it.uint(tagToken)
		key, _ := it.get(tagKey)
		req, _ := it.uint(tagRequest)
		count, _ := it.uint(tagCount)
		left, leased := it.uint(tagLeft)
		rs.held[token] = heldItem{key: string(key), request: req, count: uint32(max(count, 1)),
			left: time.Duration(left) * time.Millisecond, leased: leased}
		rs.byReq[req] = token
	}
	parked, err := w.items(tagParked)
	if err != nil {
		return nil, err
	}
	for _, it := range parked {
		req, _ := it.uint(tagRequest)
		rs.parked[req] = true
	}
	return rs, nil
}

// detach leaves the session without c. Called with s.mu held.
func (s *Session) detach(c *sconn) {
	if s.conn == c {
		s.conn, s.out, s.ping, s.replay = nil, nil, nil, nil
		s.poke()
	}
}

func (s *Session) startReader(c *sconn) {
	s.readers.Add(1)
	go func() {
		defer s.readers.Done()
		s.read(c)
	}()
}

// read handles the frames of c until it ends.
func (s *Session) read(c *sconn) {
	defer close(c.dead)
	for {
		f, err := c.fr.answer()
		if err != nil {
			break
		}
		s.mu.Lock()
		goOn := s.conn == c
		if goOn {
			s.heard = s.clk.Now()
			goOn = s.handle(f)
		}
		s.mu.Unlock()
		if !goOn {
			break
		}
	}
	s.mu.Lock()
	s.detach(c)
	s.mu.Unlock()
	c.nc.Close()
}

// run is the session's loop: it writes what is queued, pings, and
// reconnects when the connection drops, until Close or the session's end.
func (s *Session) run(c *sconn) {
	defer close(s.loopDone)
	for c != nil && s.serve(c) {
		c = s.reconnect()
	}
	s.shutdown()
	s.mu.Lock()
	if c := s.conn; c != nil {
		s.detach(c)
		c.nc.Close()
	}
	farewell := s.farewell
	s.mu.Unlock()
	s.readers.Wait()
	if farewell {
		s.sayFarewell()
	}
}

// sayFarewell closes on the server a session that the client has counted
// expired (see lostDue): the server may still keep it, with its locks and
// waiting requests, until its own TTL runs out, or longer when a new
// leader gave it a fresh TTL (each election does). It tries the
// addresses in turn with the reconnect's backoff until a server answers
// (the CLOSE, or that it no longer knows the session) or Close; it makes
// one attempt at least. Nothing of the session goes with it but a RESUME,
// a RELEASE with lapse of each lock the session held (parting), and a
// CLOSE: every request of the session failed at its end. The RELEASEs end
// those locks as their leases running out would, so that each key keeps
// the lock-delay its acquire asked for (a CLOSE alone releases at once: a
// next holder could be granted while this process still writes, the
// moment lock-delay is for). A server older than lapse refuses them
// unsupported, and its CLOSE then releases the locks without the delay.
func (s *Session) sayFarewell() {
	for attempt := 1; !s.closeOnServer(); attempt++ {
		if !s.pause(s.backoff(attempt)) {
			return
		}
	}
}

// closeOnServer makes one attempt to close the session on the server: a
// RESUME, the RELEASEs of parting and a CLOSE in one write, then the frames up to the CLOSE's
// answer, within the silence bound. It reports whether the server is done
// with the session: the CLOSE answered, or the server no longer knows it
// (or refuses it for good).
func (s *Session) closeOnServer() bool {
	s.mu.Lock()
	parting := s.parting
	s.mu.Unlock()
	b, cid := s.resumeWith(frameClose, parting...)
	addr := s.target()
	c, _, err := s.handshake(s.ctx, addr, b, s.silence())
	if err != nil {
		return !s.failedAt(addr, err)
	}
	defer c.nc.Close()
	c.nc.SetReadDeadline(time.Now().Add(s.silence()))
	for {
		f, err := c.fr.next()
		if err != nil {
			return false
		}
		switch {
		case f.typ == frameOK && f.id == cid:
			return true
		case f.typ == frameGoodbye:
			g := goodbye(f).(*goodbyeError)
			s.mu.Lock()
			if g.code == codeNotLeader {
				s.follow(g.leader)
			}
			s.mu.Unlock()
			return g.final()
		}
	}
}

// serve keeps c busy: it writes the queued frames, pings when the server
// has answered nothing for keepalive, and drops c when it has brought
// nothing for the silence bound (see silence), its node demoted. It
// returns true when c has dropped, false at Close or the session's end (c
// may still be up).
func (s *Session) serve(c *sconn) bool {
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			return false
		}
		if s.conn != c {
			s.mu.Unlock()
			c.nc.Close()
			<-c.dead
			return true
		}
		now := s.clk.Now()
		if s.ping == nil && !now.Before(s.lastAck.Add(s.keepalive)) {
			s.ping = &request{typ: framePing}
			s.enqueue(s.ping, nil)
		}
		// The ping goes out no later than keepalive after the last frame
		// heard, so a live server has answered it before this deadline.
		next := s.heard.Add(s.silence())
		if !now.Before(next) {
			s.detach(c)
			s.demote(c.addr)
			s.mu.Unlock()
			continue
		}
		if s.ping == nil {
			next = s.lastAck.Add(s.keepalive)
		}
		out := s.out
		s.out = nil
		s.mu.Unlock()
		if len(out) > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(s.silence()))
			if _, err := c.nc.Write(out); err != nil {
				c.nc.Close() // the reader sees it and detaches c
			}
		}
		if stop != nil {
			stop()
		}
		// From the clock read now: the write above may have waited.
		stop = s.clk.AfterFunc(next.Sub(s.clk.Now()), s.poke)
		select {
		case <-s.wake:
		case <-c.dead:
		case <-s.quit:
			return false
		}
	}
}

// reconnect resumes the session on a new connection, at once and then
// with a growing backoff. It returns nil at Close or when the session
// has ended (the server no longer knows it).
func (s *Session) reconnect() *sconn {
	hops := 0 // leaders followed at once since the last backoff
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		follow := s.leader != ""
		s.mu.Unlock()
		if follow && hops <= len(s.addrs) {
			// To the leader a node named, at once; nodes whose views
			// disagree (an election) get the backoff.
			attempt, hops = 0, hops+1
		} else {
			hops = 0
		}
		if attempt > 0 && !s.sleep(s.backoff(attempt)) {
			return nil
		}
		select {
		case <-s.quit:
			return nil
		case <-s.done:
			return nil
		default:
		}
		c, err := s.resume(s.ctx)
		if err == nil {
			return c
		}
		if g := (*goodbyeError)(nil); errors.As(err, &g) && g.final() {
			s.mu.Lock()
			s.endLost(err, ErrSessionExpired, "the session ended on the server while the client was away")
			s.mu.Unlock()
			return nil
		}
	}
}

// backoff returns the wait before reconnect attempt n (from 1): 50 ms
// doubling, at most a quarter of the keepalive and at most 500 ms,
// jittered, so that a session that looks for a leader during an election
// finds it soon after it serves.
func (s *Session) backoff(n int) time.Duration {
	d := min(50*time.Millisecond<<min(n-1, 10), max(s.keepalive/4, 50*time.Millisecond), 500*time.Millisecond)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d on the session's clock; false at Close or the session's
// end.
func (s *Session) sleep(d time.Duration) bool { return s.wait(d, s.done) }

// pause waits d on the session's clock; false at Close.
func (s *Session) pause(d time.Duration) bool { return s.wait(d, nil) }

// wait waits d on the session's clock; false at Close or when end closes.
func (s *Session) wait(d time.Duration, end <-chan struct{}) bool {
	ch := make(chan struct{})
	stop := s.clk.AfterFunc(d, func() { close(ch) })
	defer stop()
	select {
	case <-ch:
		return true
	case <-s.quit:
		return false
	case <-end:
		return false
	}
}

// shutdown ends the session at Close: CLOSE on the attached connection,
// or on a resumed one when none is. A session that has already ended
// needs nothing.
func (s *Session) shutdown() {
	s.mu.Lock()
	ended := s.err != nil
	s.mu.Unlock()
	if ended {
		return
	}
	err := s.sendClose()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.end(ErrSessionClosed, true, func(string) error { return ErrLockReleased })
		return
	}
	if g := (*goodbyeError)(nil); errors.As(err, &g) && g.final() {
		s.endLost(ErrSessionClosed, ErrSessionExpired, "the session ended on the server while the client was away")
		return
	}
	s.closeErr = fmt.Errorf("close session %d at %s: %w", s.id, s.addr, err)
	s.endLost(ErrSessionClosed, ErrSessionClosed,
		"Close could not tell the server; it ends the lock with the session's TTL")
}

// sendClose sends CLOSE and waits for its answer, within the read
// timeout: on the attached connection, or on a resumed one when there is
// none or it drops first (the resume sends the same CLOSE again).
func (s *Session) sendClose() error {
	ctx, cancel := context.WithCancel(context.Background())
	if s.cfg.readTimeout > 0 {
		ctx, cancel = context.WithTimeoutCause(context.Background(), s.cfg.readTimeout, os.ErrDeadlineExceeded)
	}
	defer cancel()
	r := &request{typ: frameClose, result: make(chan result, 1)}
	s.mu.Lock()
	s.enqueue(r, nil)
	s.mu.Unlock()
	for range 2 {
		s.mu.Lock()
		c := s.conn
		s.mu.Unlock()
		if c == nil {
			var err error
			if c, err = s.resume(ctx); err != nil {
				return err
			}
		}
		s.mu.Lock()
		out := s.out
		s.out = nil
		s.mu.Unlock()
		c.nc.SetWriteDeadline(time.Now().Add(s.silence()))
		if _, err := c.nc.Write(out); err == nil {
			select {
			case res := <-r.result:
				return res.err
			case <-c.dead:
			case <-ctx.Done():
				return fmt.Errorf("no answer within %v (%w)", s.cfg.readTimeout, context.Cause(ctx))
			}
		}
		c.nc.Close()
		<-c.dead // its reader has detached it
		select {
		case res := <-r.result: // the answer came just before the close
			return res.err
		default:
		}
	}
	return errors.New("the connection dropped before the answer")
}

// --- frames from the server ---

// handle applies one frame from the attached connection and reports
// whether to go on reading it. Called with s.mu held.
func (s *Session) handle(f *frame) bool {
	switch f.typ {
	case frameGranted, frameOK, frameRefused, frameInfo:
		if s.ping != nil && f.id == s.ping.id {
			s.ack(s.ping.sentAt)
			s.ping = nil
			s.poke() // the next ping is set from this answer, not at the silence bound
			return true
		}
		if s.replay != nil && f.id == s.replay.syncID {
			s.reconcile()
			return true
		}
		if s.watchAnswer(f) {
			return true
		}
		r := s.inflight[f.id]
		if r == nil {
			return true
		}
		code, _ := f.uint(tagCode)
		if f.typ == frameRefused && code == codeDuplicate && r.resent {
			// The old connection's reader applied it after all; its own
			// answer comes too.
			return true
		}
		s.ack(r.sentAt)
		delete(s.inflight, r.id)
		s.answer(r, f, code)
	case frameLost:
		s.lost(f)
	case frameEvent:
		s.watchEvent(f)
	case frameGoodbye:
		g := goodbye(f).(*goodbyeError)
		switch g.code {
		case codeSessionExpired, codeUnknownSession:
			s.endLost(g, ErrSessionExpired, "its session expired")
		case codeProtocolError:
			s.endLost(g, nil, "the server ended the session's connection for a protocol error")
		case codeNotLeader:
			s.follow(g.leader) // resume there, or at the next address
		}
		return false // shutting_down and the others: resume elsewhere
	}
	return true
}

// answer applies the answer f (with its code, if any) to r.
func (s *Session) answer(r *request, f *frame, code uint64) {
	msg, _ := f.get(tagMessage)
	switch r.typ {
	case frameAcquire:
		switch {
		case f.typ == frameGranted:
			s.granted(r, f)
		case f.typ == frameRefused && !r.abandoned:
			r.result <- result{err: refusal("acquire", r.key, code, string(msg))}
		}
	case frameRelease, frameRenew:
		var err error
		switch {
		case f.typ == frameRefused && code == codeStaleToken:
			err = refusal(releaseOrRenew(r.typ), r.key, code, string(msg))
			if h := s.holds[r.token]; h != nil {
				s.endHold(h, lostError(r.key, nil, "the server no longer holds it"))
			}
		case f.typ == frameRefused:
			err = refusal(releaseOrRenew(r.typ), r.key, code, string(msg))
		case r.typ == frameRenew:
			err = s.renewed(r, f)
		}
		if r.result != nil {
			r.result <- result{err: err}
		}
	case frameClose:
		var err error
		if f.typ == frameRefused {
			err = refusal("close", "", code, string(msg))
		}
		r.result <- result{err: err}
	case frameDescribe:
		var res result
		if f.typ == frameInfo {
			res.info, res.err = parseInfo(f)
		} else {
			res.err = refusal("describe", r.key, code, string(msg))
		}
		if r.onInfo != nil {
			r.onInfo(res.info, res.err)
		} else {
			r.result <- res
		}
	}
}

func releaseOrRenew(typ byte) string {
	if typ == frameRenew {
		return "renew"
	}
	return "release"
}

// renewed moves the lease of a renewed lock.
func (s *Session) renewed(r *request, f *frame) error {
	if r.lock.cause != nil {
		return r.lock.cause
	}
	if left, ok := f.uint(tagLeft); ok && r.lock.h != nil {
		s.setLease(r.lock.h, s.measuredAt(r.sentAt), time.Duration(left)*time.Millisecond)
	}
	return nil
}

// granted applies a GRANTED of the acquire r.
func (s *Session) granted(r *request, f *frame) {
	token, _ := f.uint(tagToken)
	if r.abandoned {
		s.enqueueRelease(r.key, token, nil, nil)
		return
	}
	ms, leased := f.uint(tagLeft)
	from, left := s.measuredAt(r.sentAt), time.Duration(ms)*time.Millisecond
	if rs := s.replay; rs != nil {
		if r.id > rs.applied || rs.parked[r.id] {
			rs.fresh[token] = true
		} else { // a grant from before the resume
			hi, ok := rs.held[token]
			if !ok {
				r.result <- result{err: fmt.Errorf("acquire %q: %w: granted, then lost while the connection was down",
					r.key, ErrAnswerLost)}
				return
			}
			from, left, leased = rs.sentAt, hi.left, hi.leased
		}
	}
	s.grant(r, token, leased, from, left)
}

// lost applies a LOST: every lock of its token ends.
func (s *Session) lost(f *frame) {
	token, _ := f.uint(tagToken)
	code, _ := f.uint(tagCode)
	delete(s.letGo, token)
	if h := s.holds[token]; h != nil {
		s.endHold(h, lostByCode(h.key, code))
		return
	}
	// A grant whose GRANTED went with a dropped connection.
	if r := s.inflight[f.id]; r != nil && r.typ == frameAcquire && r.id <= s.replayApplied() {
		delete(s.inflight, r.id)
		if !r.abandoned {
			key, _ := f.get(tagKey)
			r.result <- result{err: fmt.Errorf("acquire %q: %w: granted, then lost: %v",
				r.key, ErrAnswerLost, lostByCode(string(key), code))}
		}
	}
}

func (s *Session) replayApplied() uint64 {
	if s.replay == nil {
		return 0
	}
	return s.replay.applied
}

// reconcile settles the session after a resume, once every frame the
// server owed it has arrived, against what the WELCOME listed: a lock not
// listed was lost while away; an acquire the server applied whose answer
// never came is granted if listed, else failed; a listed lock nobody here
// holds is released, unless it was left to the server.
func (s *Session) reconcile() {
	rs := s.replay
	s.replay = nil
	for token, h := range s.holds {
		if hi, ok := rs.held[token]; ok {
			if hi.leased {
				s.setLease(h, rs.sentAt, hi.left)
			}
		} else if !rs.fresh[token] {
			s.endHold(h, lostError(h.key, nil, "lost while the connection was down"))
		}
	}
	var unanswered []*request
	for _, id := range s.inflightIDs() {
		r := s.inflight[id]
		if id > rs.applied || r.typ == frameAcquire && rs.parked[id] || r.typ == frameDescribe {
			continue // sent again, or still waiting: answered later
		}
		delete(s.inflight, id)
		if token, ok := rs.byReq[id]; ok && r.typ == frameAcquire && !r.abandoned {
			s.grantListed(r, token, rs)
			continue
		}
		unanswered = append(unanswered, r)
	}
	// What the server holds beyond the locks here and the releases in
	// flight: grants whose GRANTED went with the connection.
	extra := map[uint64]int{}
	for token, hi := range rs.held {
		extra[token] = int(hi.count)
		if h := s.holds[token]; h != nil {
			extra[token] -= len(h.locks)
		}
	}
	for _, r := range s.inflight {
		if r.typ == frameRelease {
			extra[r.token]--
		}
	}
	for _, r := range unanswered {
		switch r.typ {
		case frameAcquire:
			if r.abandoned {
				continue
			}
			if token, ok := reentered(rs, extra, r); ok {
				extra[token]--
				s.grantListed(r, token, rs)
				continue
			}
			r.result <- result{err: fmt.Errorf("acquire %q: %w", r.key, ErrAnswerLost)}
		case frameRenew:
			if _, ok := rs.held[r.token]; !ok {
				r.result <- result{err: fmt.Errorf("renew %q: %w", r.key, ErrLockLost)}
			} else {
				r.result <- result{}
			}
		case frameRelease, frameClose:
			if r.result != nil {
				r.result <- result{}
			}
		}
	}
	for token, hi := range rs.held {
		if s.letGo[token] {
			continue
		}
		for n := extra[token]; n > 0; n-- {
			s.enqueueRelease(hi.key, token, nil, nil)
		}
	}
	for token := range s.letGo {
		if _, ok := rs.held[token]; !ok {
			delete(s.letGo, token)
		}
	}
}

// reentered finds the listed lock that a Reentrant acquire r counted up,
// if the count says one did.
func reentered(rs *resumeState, extra map[uint64]int, r *request) (uint64, bool) {
	if !r.opts.reentrant {
		return 0, false
	}
	for token, hi := range rs.held {
		if hi.key == r.key && extra[token] > 0 {
			return token, true
		}
	}
	return 0, false
}

// grantListed grants r the listed lock of token.
func (s *Session) grantListed(r *request, token uint64, rs *resumeState) {
	hi := rs.held[token]
	s.grant(r, token, hi.leased, rs.sentAt, hi.left)
}
