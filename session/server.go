package session

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/locking-center/locking-center/auth"
	"github.com/locking-center/locking-center/internal/ratelimit"
	"github.com/locking-center/locking-center/internal/serve"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/locking-center/locking-center/mutex"
)

// Defaults of Config.
const (
	DefaultTTL           = 10 * time.Second
	DefaultMinTTL        = time.Second
	DefaultMaxTTL        = 5 * time.Minute
	DefaultHeaderTimeout = 10 * time.Second
	DefaultParkAfter     = time.Second
)

// Log attribute keys.
const (
	logRemote    = "remote"
	logSession   = "session"
	logError     = "error"
	logPrincipal = "principal"
)

// Authenticator finds the principal of a token; *auth.Keyring is one.
type Authenticator interface {
	Authenticate(token []byte) (*auth.Principal, error)
}

// Config configures a Server.
type Config struct {
	// TTL is the session TTL when HELLO asks for none; MinTTL and MaxTTL
	// clamp what it asks for. Zero means DefaultTTL (10 s), DefaultMinTTL
	// (1 s) and DefaultMaxTTL (5 min).
	TTL, MinTTL, MaxTTL time.Duration
	// MaxKeepalive, when set, caps the keepalive_ms that WELCOME gives
	// (a third of the TTL otherwise). A node of a cluster sets it to two
	// election timeouts: a client takes a node that answers nothing for
	// its keepalive plus a margin for dead and looks for the leader
	// elsewhere, so a frozen leader is left about as soon as another is
	// elected, whatever the TTL.
	MaxKeepalive time.Duration
	// LockDelay is the lock-delay of an acquire that names none; at most
	// mutex.MaxLockDelay. Zero: none.
	LockDelay time.Duration
	// HeaderTimeout bounds the arrival of the preface and the first frame,
	// and the time a client that does not read may hold up our writes.
	// Zero means DefaultHeaderTimeout (10 s).
	HeaderTimeout time.Duration
	// ServerID is the identity WELCOME names.
	ServerID string
	// SourceFromCert names each session after its client's verified
	// certificate (tlsconf.PeerName), in place of HELLO's name, and
	// charges the session to that name (to the principal's, with
	// Tokens); a RESUME must come with a certificate of the same name. A connection without such a
	// certificate is sent GOODBYE bad_request. It needs connections of a
	// TLS port that requires client certificates.
	SourceFromCert bool
	// Tokens, when set, turns authentication on: HELLO and RESUME must
	// carry the token of a principal (docs/security.md), whose prefixes
	// bound the keys it may acquire, describe and watch, and whose name is
	// the account its sessions are charged to. Nil: off; a credential is
	// then ignored, and a session is charged to its client's IP address.
	Tokens Authenticator
	// Rates limits each account's requests (every frame but PING and
	// CLOSE); nil: no limit.
	Rates *ratelimit.Rates
	// ParkAfter is how long a plain TCP connection may go without a frame
	// before its goroutine ends and it waits, with every other such
	// connection, in one epoll set (Linux only): from then on the server
	// answers its PINGs without a goroutine, and gives it one again for
	// any other frame. A connection whose last read held only PINGs parks
	// at once. Zero means DefaultParkAfter (1 s); negative: never.
	ParkAfter time.Duration
	// EventLoop, on a node that is not replicated, parks a plain TCP
	// connection (Linux) as soon as it has no frame half read, and the
	// poller serves every frame that comes whole on a parked connection
	// itself, without giving it a goroutine, as an event loop does: a busy
	// connection then costs a read and a write per batch of requests, with
	// no goroutine to wake. A read that ends inside a frame, or holds a
	// CLOSE (whose answer waits for the write-ahead log), still goes to a
	// goroutine of the connection's own. It needs ParkAfter not negative;
	// a replicated node ignores it (its commands wait for the raft log).
	EventLoop bool
	// Pollers is how many pollers hold the parked connections, each an
	// epoll set with a goroutine of its own; a connection is given to one
	// of them, in turn, for its life. Zero means one, or with EventLoop
	// one for every two processors the Go runtime uses (GOMAXPROCS), at
	// least one: each poller's table work takes the node's lock, and on
	// 2 cores one poller served 16 and 64 busy sessions at 0.80 to 0.95
	// of the CPU per cycle of two, and as many cycles (docs/benchmarks.md,
	// "The event loop").
	Pollers int
	// NoSendRing has the event loop write the answers of each connection
	// with a system call of their own. By default (Linux 5.6 and later,
	// where io_uring is not turned off), the answers of the connections a
	// take of the epoll set served leave in one call (serve.SendRing): on
	// 2 cores shared with its clients, lcd so served 1.16 to 1.34 times
	// the session cycles at 0.71 to 0.88 of the CPU per cycle
	// (docs/benchmarks.md, "Answers sent in one call").
	NoSendRing bool
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MinTTL <= 0 || c.MaxTTL < c.MinTTL:
		return fmt.Errorf("session: TTL range %v to %v is empty", c.MinTTL, c.MaxTTL)
	case c.TTL < c.MinTTL || c.TTL > c.MaxTTL:
		return fmt.Errorf("session: default TTL %v is outside %v to %v", c.TTL, c.MinTTL, c.MaxTTL)
	case c.LockDelay < 0 || c.LockDelay > mutex.MaxLockDelay:
		return fmt.Errorf("session: lock-delay %v is outside 0 to %v", c.LockDelay, mutex.MaxLockDelay)
	case c.HeaderTimeout < 0:
		return errors.New("session: header timeout must not be negative")
	case len(c.ServerID) > maxSize[TagServer]:
		return errors.New("session: server id over 255 bytes")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.MinTTL == 0 {
		c.MinTTL = min(DefaultMinTTL, c.TTL)
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = max(DefaultMaxTTL, c.TTL)
	}
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.ParkAfter == 0 {
		c.ParkAfter = DefaultParkAfter
	}
	return c
}

// Server serves the session protocol on connections handed to it by the
// mutex port's server (see oneshot.Handoff), over one mutex.Node.
type Server struct {
	node  *mutex.Node
	cfg   Config
	log   *slog.Logger
	group serve.Group

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool

	watch     watches
	closeOnce sync.Once
	pollers   []*poller     // empty: connections never park
	nextPoll  atomic.Uint32 // the poller of the next connection, modulo len(pollers)
	loop      bool          // Config.EventLoop, on a node that is not replicated, with pollers
}

// NewServer returns a server over n. Errors: those of cfg.Validate.
func NewServer(n *mutex.Node, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{node: n, cfg: cfg.withDefaults(), log: serve.Discard(cfg.Logger), conns: make(map[*conn]struct{})}
	if s.cfg.ParkAfter > 0 {
		s.loop = cfg.EventLoop && !n.Replicated()
		count := cfg.Pollers
		if count <= 0 {
			count = 1
			if s.loop {
				count = max(runtime.GOMAXPROCS(0)/2, 1)
			}
		}
		for range count {
			p, err := newPoller(s)
			if err != nil {
				for _, p := range s.pollers {
					p.close()
				}
				return nil, fmt.Errorf("session: %w", err)
			}
			if p != nil { // nil: no poller on this system
				s.pollers = append(s.pollers, p)
			}
		}
	}
	s.startWatches()
	return s, nil
}

// Close tells every connection that the server is stopping (GOODBYE
// shutting_down), closes them and waits for the goroutines the server
// started. Sessions are not ended: with a write-ahead log their clients
// resume after the restart. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.send(goodbye(CodeShuttingDown, "the server is stopping"))
		c.close()
	}
	s.closeOnce.Do(s.watch.close)
	s.group.Close()
	for _, p := range s.pollers {
		p.close()
	}
	s.group.Wait()
	return nil
}

// Serve serves one connection that began with got (some or all of the
// preface, maybe more) until it ends or parks (Config.ParkAfter). It is
// the oneshot.Handoff of the mutex port: it reports keep when the
// connection parked, and ends it later with finish (nil: Close). A
// connection that does not begin with the whole preface is answered '-',
// as v1 answers a malformed request.
func (s *Server) Serve(nc net.Conn, got []byte, finish func(net.Conn)) (keep bool) {
	c := newConn(s, nc, finish)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	r := c.begin(got)
	if r == nil {
		c.end()
		return false
	}
	return c.run(r, true)
}

// run handles c's frames until the connection ends, and then ends it, or
// parks, and reports whether it parked; opened tells that r holds what
// followed the HELLO or RESUME. (It is kept apart from begin and batch
// so that the stack of a connection parked in a read stays small enough
// for the garbage collector to shrink it.)
func (c *conn) run(r *reader, opened bool) (parked bool) {
	for {
		ok, pings, others := c.batch(r)
		if !ok {
			c.end()
			return false
		}
		// Idle at once: the client sent PINGs only, or nothing yet after
		// opening its session; with the event loop, whenever nothing is
		// half read.
		if (c.s.loop || others == 0 && (pings > 0 || opened)) && c.park(r) {
			return true
		}
		opened = false
		err := c.fill(r)
		if errors.Is(err, errParked) {
			return true
		}
		if err != nil {
			c.ended(err)
			// A client that shut down its writes still reads its answers.
			c.owesLast = errors.Is(err, io.EOF)
			c.end()
			return false
		}
		c.sess.live.Load().Touch()
	}
}

// fill reads once into r. A connection that may park reads under a
// deadline of Config.ParkAfter, moved on at most every half of it, and
// parks when the deadline passes with no frame half read: errParked.
func (c *conn) fill(r *reader) error {
	if c.raw == nil {
		return r.fill()
	}
	for {
		now := time.Now()
		if after := c.s.cfg.ParkAfter; now.Sub(c.deadlineSet) > after/2 {
			c.deadlineSet = now
			c.nc.SetReadDeadline(now.Add(after))
		}
		err := r.fill()
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		c.deadlineSet = time.Time{}
		if c.park(r) {
			return errParked
		}
	}
}

// errParked: the connection is the poller's now (conn.fill).
var errParked = errors.New("session: connection parked")

// park hands c to the poller when nothing is half read in r, and reports
// whether it did; the caller then leaves c and r alone.
func (c *conn) park(r *reader) bool {
	if c.raw == nil || r.off < len(r.buf) {
		return false
	}
	// The poller reads without a deadline; the goroutine that has the
	// connection next sets one at its first read.
	c.nc.SetReadDeadline(time.Time{})
	c.deadlineSet = time.Time{}
	r.buf, r.off, r.f.Fields = nil, 0, nil // an idle connection keeps no buffers
	c.sess.shed()
	return c.pl.add(c)
}

// end ends the connection's service: the server forgets it, the session
// is left without it, and the connection is finished.
func (c *conn) end() {
	if c.owesLast {
		c.sess.awaitWritten(c)
	}
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	c.detach()
	c.finish(c.nc)
}

// endLater ends c in a goroutine of its own, or here when the server is
// closing.
func (c *conn) endLater() {
	if !c.s.group.Go(c.end) {
		c.end()
	}
}

// leading reports whether this server's node may change its table: a
// node of a cluster only while it leads.
func (s *Server) leading() bool { return !s.node.Replicated() || s.node.IsLeader() }

// notLeader returns the GOODBYE not_leader that sends a client to the
// leader, naming it when it is known; it answers request id (0: none).
func (s *Server) notLeader(id uint64) []byte {
	leader := s.node.Leader()
	msg := "this node does not lead its cluster; the leader is " + leader
	switch {
	case leader != "":
	case s.node.Removed():
		msg = "this node was removed from its cluster; ask another node"
	default:
		msg = "this node does not lead its cluster, and no leader is known yet"
	}
	return goodbyeLeader(id, CodeNotLeader, msg, leader)
}

// LeaderLost ends every connection with GOODBYE not_leader, naming the
// leader when it is known: the node no longer leads its cluster, and its
// sessions live on in the replicated table, to be resumed at the leader.
// A node of a cluster calls it when it steps down.
func (s *Server) LeaderLost() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	bye := s.notLeader(0)
	for _, c := range conns {
		c.flushThenSend(bye)
		c.close()
	}
}

// begin reads the preface and the first frame and opens or resumes the
// session. It returns the connection's reader, or nil when the connection
// ends. (Serve's loop is kept apart from it, and from batch, so that the
// stack of an idle connection, parked in a read under Serve, stays small
// enough for the garbage collector to shrink it.)
func (c *conn) begin(got []byte) *reader {
	nc := c.nc
	nc.SetReadDeadline(time.Now().Add(c.s.cfg.HeaderTimeout))
	r := &reader{c: nc, buf: append(make([]byte, 0, initialRead), got...)}
	if !r.readPreface() {
		nc.Write([]byte{'-'})
		return nil
	}
	if !c.s.leading() {
		c.send(c.s.notLeader(0))
		return nil
	}
	// A HELLO or RESUME refused unsupported leaves the connection
	// waiting for another, within the same header timeout.
	for {
		if err := r.next(&r.f); err != nil {
			c.refuseFrame(err)
			return nil
		}
		ok, again := c.open(&r.f)
		if ok {
			break
		}
		if !again {
			return nil
		}
	}
	nc.SetReadDeadline(time.Time{})
	c.r = r
	if c.pl != nil {
		c.raw = c.now.Raw() // nil for a *tls.Conn: it never parks
	}
	return r
}

// batch handles the whole frames read so far, their answers held back to
// leave in one write, and reports whether the connection goes on and how
// many of the frames were PINGs and how many others.
func (c *conn) batch(r *reader) (ok bool, pings, others int) {
	c.handling.Lock()
	defer c.handling.Unlock()
	c.sess.beginBatch()
	for {
		err := r.parse(&r.f)
		if errors.Is(err, errIncomplete) {
			c.sess.endBatch()
			return true, pings, others
		}
		if err != nil {
			c.sess.endBatch()
			c.refuseFrame(err)
			return false, pings, others
		}
		if r.f.Type == TypePing {
			pings++
		} else {
			others++
			if c.taken {
				// Another connection resumed the session: this request
				// and the rest never arrived, and the client sends them
				// again there. (A PING changes nothing: the connection
				// goes on to be closed as any other.)
				c.sess.endBatch()
				return false, pings, others
			}
		}
		if !c.handle(&r.f) {
			c.sess.endBatch()
			return false, pings, others
		}
	}
}

// ended logs why a connection's read failed, unless it is the usual end.
func (c *conn) ended(err error) {
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.s.log.Debug("session connection ended", slog.String(logRemote, c.remote), slog.Any(logError, err))
	}
}

// initialRead is the read buffer of an idle connection, in bytes; it grows
// for a larger frame and shrinks back after it.
const initialRead = 512

// reader reads frames from a connection into one buffer.
type reader struct {
	c   net.Conn
	buf []byte // buf[off:] is unparsed
	off int
	f   Frame // the frame last parsed; its fields alias buf
}

// readPreface reads until the preface is whole and reports whether the
// bytes are the preface.
func (r *reader) readPreface() bool {
	for len(r.buf) < len(Preface) {
		if string(r.buf) != Preface[:len(r.buf)] {
			return false
		}
		if r.fill() != nil {
			return false
		}
	}
	if string(r.buf[:len(Preface)]) != Preface {
		return false
	}
	r.off = len(Preface)
	return true
}

// next reads until one whole frame is in and decodes it.
func (r *reader) next(f *Frame) error {
	for {
		err := r.parse(f)
		if !errors.Is(err, errIncomplete) {
			return err
		}
		if err := r.fill(); err != nil {
			return err
		}
	}
}

// parse decodes the next whole frame of the buffer, if it is whole.
func (r *reader) parse(f *Frame) error {
	n, err := ParseFrame(r.buf[r.off:], f)
	if err != nil {
		return err
	}
	r.off += n
	return nil
}

// fill moves the unparsed bytes to the front, makes room for the frame
// being read, and reads once.
func (r *reader) fill() error {
	rest := r.buf[r.off:]
	need := initialRead
	if len(rest) >= 4 {
		if n := int(rest[0])<<24 | int(rest[1])<<16 | int(rest[2])<<8 | int(rest[3]); n <= MaxFrame {
			need = max(need, 4+n)
		}
	}
	if cap(r.buf) < need || cap(r.buf) > 4*initialRead && need <= initialRead && len(rest) <= initialRead {
		nb := make([]byte, len(rest), max(need, initialRead))
		copy(nb, rest)
		r.buf = nb
	} else {
		r.buf = r.buf[:copy(r.buf[:cap(r.buf)], rest)]
	}
	r.off = 0
	n, err := r.c.Read(r.buf[len(r.buf):cap(r.buf)])
	r.buf = r.buf[:len(r.buf)+n]
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// --- connection ---

// conn is one connection of the session protocol.
type conn struct {
	s      *Server
	nc     net.Conn
	finish func(net.Conn) // ends nc
	remote string
	sess   *sess   // set once HELLO or RESUME succeeded
	r      *reader // set with sess

	// Of the goroutine that serves the connection, or of the poller
	// while it is parked.
	raw         syscall.RawConn // nil: it never parks
	pl          *poller         // the poller that holds c when it parks
	deadlineSet time.Time       // when the read deadline was last moved on

	// Guarded by the poller's mutex.
	parkID      uint64 // its id in the poller while parked, else 0
	pollBusy    bool   // the poller is reading or answering it
	closeWanted bool   // closed: it parks no more (the poller ends it if busy with it)

	// handling is held while the connection's frames are handled (batch);
	// taken, set under it, stops the handling of any frame after: a RESUME
	// on another connection takes the session over (conn.stop).
	handling sync.Mutex
	taken    bool

	// owesLast: the connection ends once the session has given it what
	// it owes (end): it said GOODBYE after its answers (sendLast), or its
	// client shut down its writes. Of whoever serves the connection.
	owesLast bool

	wmu      sync.Mutex
	now      serve.NowWriter // writes without waiting
	wbuf     []byte          // written by the drainer, or held
	wframes  int             // frames in wbuf (one partly written counts whole)
	writing  int             // frames the drainer is writing now
	drainer  bool            // a drainer goroutine is writing
	dead     bool
	held     bool // writes wait in wbuf for the poller's unhold
	heldPush bool // what is held carries a pushed frame
}

func newConn(s *Server, nc net.Conn, finish func(net.Conn)) *conn {
	if finish == nil {
		finish = func(nc net.Conn) { nc.Close() }
	}
	c := &conn{s: s, nc: nc, finish: finish, remote: nc.RemoteAddr().String()}
	if len(s.pollers) > 0 {
		// Set once here: a resume on another connection may close c
		// (conn.close) while c's goroutine still opens its session.
		c.pl = s.pollers[s.nextPoll.Add(1)%uint32(len(s.pollers))]
	}
	c.now.Init(nc)
	return c
}

// send writes one frame, b, as sendFrames does.
func (c *conn) send(b []byte) { c.sendFrames(b, 1) }

// sendFrames writes b, which holds frames frames, without waiting: at
// once if the socket takes it all, otherwise the rest goes to a goroutine
// that writes it under the header timeout (a client that stops reading is
// cut). The frames not yet written count in backlog.
func (c *conn) sendFrames(b []byte, frames int) { c.write(b, frames, false) }

// write is sendFrames; pushed tells that b holds a frame pushed to a
// client that waits for it (serve.NowWriter.WritePush).
func (c *conn) write(b []byte, frames int, pushed bool) {
	if len(b) == 0 {
		return
	}
	if h := sendHook.Load(); h != nil {
		(*h)(b)
	}
	c.wmu.Lock()
	cut := false
	switch {
	case c.dead:
	case c.drainer || c.held:
		if len(c.wbuf)+len(b) > maxUnwritten {
			// The client leaves its answers unread: cut it rather than
			// hold them (docs/protocol.md, Timeouts).
			c.s.log.Info("session connection cut: its client left its answers unread",
				slog.String(logRemote, c.remote), slog.Int("unwritten_bytes", len(c.wbuf)+len(b)))
			c.dead, cut = true, true
			break
		}
		c.wbuf = append(c.wbuf, b...)
		c.wframes += frames
		c.heldPush = c.heldPush || pushed
	default:
		cut = c.writeNow(b, frames, pushed)
	}
	c.wmu.Unlock()
	if cut {
		c.close()
	}
}

// writeNow writes b, frames frames, to the socket without waiting, and
// gives what it did not take to a drainer goroutine, in wbuf (which b may
// be). It is called with wmu held, when no drainer runs, and reports
// whether the connection is to be closed: the write failed.
func (c *conn) writeNow(b []byte, frames int, pushed bool) (cut bool) {
	var n int
	var err error
	if pushed {
		n, err = c.now.WritePush(b)
	} else {
		n, err = c.now.Write(b)
	}
	return c.wrote(b, frames, n, err)
}

// wrote finishes writeNow once n bytes of b went, or err came.
func (c *conn) wrote(b []byte, frames, n int, err error) (cut bool) {
	if err != nil {
		c.dead = true
		c.wbuf, c.wframes = c.wbuf[:0], 0
		return true
	}
	if n == len(b) {
		c.wbuf, c.wframes = c.wbuf[:0], 0
		return false
	}
	c.wbuf = append(c.wbuf[:0], b[n:]...) // copy handles b aliasing wbuf
	c.wframes = frames
	c.drainer = true
	if !c.s.group.Go(c.drain) {
		c.dead = true
		return true
	}
	return false
}

// hold makes c's writes wait in wbuf, given room, until unhold: the
// poller holds the answers of the connections it serves until it has
// served every one its take of the epoll set found ready, and then
// writes them one after another, as Redis writes its replies before it
// waits again. Their clients then wake at about the same time, and a
// client's host takes their answers in fewer wake-ups (docs/benchmarks.md,
// "Answers written after the take").
func (c *conn) hold(room []byte) {
	c.wmu.Lock()
	if !c.dead && !c.drainer {
		c.held = true
		if cap(c.wbuf) == 0 {
			c.wbuf = room
		}
	}
	c.wmu.Unlock()
}

// unhold writes what c's writes held since hold, as write would have. It
// returns wbuf's room when everything left at once, for the poller to
// lend again (an idle connection keeps no buffer), or nil.
func (c *conn) unhold() (room []byte) {
	c.wmu.Lock()
	if !c.held {
		c.wmu.Unlock()
		return nil
	}
	c.held = false
	pushed := c.heldPush
	c.heldPush = false
	cut := false
	if !c.dead && !c.drainer && len(c.wbuf) > 0 {
		cut = c.writeNow(c.wbuf, c.wframes, pushed)
	}
	room = c.spareRoom()
	c.wmu.Unlock()
	if cut {
		c.close()
	}
	return room
}

// spareRoom gives up wbuf when everything in it has been written, and
// returns it, or nil: an idle connection keeps no buffer. wmu is held.
func (c *conn) spareRoom() (room []byte) {
	if !c.drainer && len(c.wbuf) == 0 {
		room, c.wbuf = c.wbuf, nil
	}
	return room
}

// maxUnwritten bounds what one connection's socket has not taken yet, in
// bytes: a connection that would hold more is cut (conn.sendFrames).
const maxUnwritten = 4 << 20

// sendHook, when set (tests), sees every frame the server writes, before
// it is written.
var sendHook atomic.Pointer[func([]byte)]

// backlog returns how many frames sent to c have not reached its socket.
func (c *conn) backlog() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.wframes + c.writing
}

// drain writes what send could not, until nothing is left.
func (c *conn) drain() {
	var buf []byte
	for {
		c.wmu.Lock()
		buf, c.wbuf = c.wbuf, buf[:0]
		c.writing, c.wframes = c.wframes, 0
		if len(buf) == 0 || c.dead {
			// The writes without waiting that follow must not meet this
			// goroutine's deadline once it has passed.
			c.nc.SetWriteDeadline(time.Time{})
			c.drainer, c.writing = false, 0
			c.wmu.Unlock()
			return
		}
		c.wmu.Unlock()
		c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.HeaderTimeout))
		if _, err := c.nc.Write(buf); err != nil {
			c.wmu.Lock()
			c.dead, c.drainer, c.writing = true, false, 0
			c.wmu.Unlock()
			c.close()
			return
		}
	}
}

// close closes the connection, once what the poller holds of its writes
// is written. The goroutine that serves it then finds it closed and ends
// it; while it is parked, close ends it. It is not called with wmu held.
func (c *conn) close() {
	c.unhold()
	if c.pl != nil && c.pl.closeParked(c) {
		return
	}
	c.nc.Close()
}

// refuseFrame answers a frame that cannot be parsed and ends the
// connection; the session lives on for its TTL.
func (c *conn) refuseFrame(err error) {
	if !errors.Is(err, ErrProtocol) {
		return // the read failed: nothing to tell
	}
	c.s.log.Debug("protocol error on a session connection", slog.String(logRemote, c.remote), slog.Any(logError, err))
	c.sendLast(goodbye(CodeProtocolError, err.Error()))
}

// sendLast sends b, a GOODBYE, after everything the session owes c, and
// has c's end wait until the connection has it (end): the answers of the
// requests read before it go ahead of it, also those that wait for the
// log. Called by whoever serves c; it ends a batch under way.
func (c *conn) sendLast(b []byte) {
	s := c.sess
	if s == nil || !s.queueFor(c, b) {
		c.send(b)
		return
	}
	s.endBatch()
	c.owesLast = true
}

// flushThenSend writes what the session has waiting, then b.
func (c *conn) flushThenSend(b []byte) {
	if c.sess != nil {
		c.sess.Flush()
	}
	c.send(b)
}

// stop ends the handling of c's frames, once the batch being handled now,
// if any, is done: the session is resumed on another connection.
// The caller holds c.handling from then on, and unlocks it once c has
// been told why.
func (c *conn) stop() {
	c.handling.Lock() // waits for the batch in progress
	c.taken = true
}

// detach leaves the session without a connection, for its resume.
func (c *conn) detach() {
	s := c.sess
	if s == nil {
		return
	}
	s.mu.Lock()
	mine := s.conn == c
	if mine {
		s.conn = nil
	}
	s.mu.Unlock()
	if mine {
		c.s.node.SetRemote(s.id, "")
	}
}

// open handles the first frame: HELLO or RESUME. It reports whether the
// session is open, and, when it is not, whether the connection waits for
// another HELLO or RESUME: one with a field the server does not know is
// refused unsupported, so that a client of a later version may try again
// without it.
func (c *conn) open(f *Frame) (ok, again bool) {
	allowed := helloTags
	switch f.Type {
	case TypeHello:
	case TypeResume:
		allowed = resumeTags
	default:
		c.send(goodbye(CodeProtocolError, "the first frame must be HELLO or RESUME"))
		return false, false
	}
	if tag, unknown := unknownField(f, allowed); unknown {
		c.send(unsupported(f.ID, tag))
		return false, true
	}
	if f.Type == TypeHello {
		return c.hello(f), false
	}
	return c.resume(f), false
}

func (c *conn) hello(f *Frame) bool {
	p, account, ok := c.authenticate(f)
	if !ok {
		return false
	}
	name, _ := f.Get(TagName)
	source := string(name)
	if c.s.cfg.SourceFromCert {
		source, _ = tlsconf.PeerName(c.nc) // authenticate found it
	}
	if source == "" {
		source = peerIP(c.nc)
	}
	ttl := c.s.cfg.TTL
	if ms, ok := f.Uint(TagTTL); ok && ms != 0 { // 0: the default, as absent
		ttl = min(max(time.Duration(ms)*time.Millisecond, c.s.cfg.MinTTL), c.s.cfg.MaxTTL)
	}
	var secret [SecretLen]byte
	rand.Read(secret[:])
	s := &sess{srv: c.s, name: source, conn: c, principal: p, account: account}
	live, res, pend := c.s.node.OpenSessionAs(account, source, ttl, sha256.Sum256(secret[:]), c.remote, s)
	if res.Status == mutex.StatusUnavailable {
		c.send(c.s.notLeader(f.ID))
		return false
	}
	if live == nil {
		c.send(goodbyeTo(f.ID, CodeBadRequest, "the session could not be opened: "+res.Status.String()))
		return false
	}
	s.id = live.ID()
	s.live.Store(live)
	c.sess = s
	fb := begin(nil, TypeWelcome, f.ID)
	c.welcomeFields(&fb, s.id, secret[:], ttl)
	s.queue(item{raw: fb.end(), pending: pend})
	s.Flush()
	return true
}

// authenticate checks the credential of f, a HELLO or RESUME, and returns
// its principal and the account the session is charged to: the
// principal's name; without authentication, with SourceFromCert, the
// name of the client's certificate; else the client's IP address. A
// refusal has been answered with GOODBYE (unauthenticated, rate_limited,
// bad_request for a connection without a named certificate under
// SourceFromCert).
func (c *conn) authenticate(f *Frame) (*auth.Principal, string, bool) {
	account := peerIP(c.nc)
	if c.s.cfg.SourceFromCert {
		var ok bool
		if account, ok = c.certName(f.ID); !ok {
			return nil, "", false
		}
	}
	var p *auth.Principal
	if c.s.cfg.Tokens != nil {
		cred, _ := f.Get(TagCredential)
		var err error
		if p, err = c.s.cfg.Tokens.Authenticate(cred); err != nil {
			c.s.node.Refused(mutex.RefusedUnauthenticated)
			c.s.log.Info("session authentication failed", slog.String(logRemote, c.remote))
			c.send(goodbyeTo(f.ID, CodeUnauthenticated, "authentication failed"))
			return nil, "", false
		}
		account = p.Name
	}
	if !c.s.cfg.Rates.Allow(account) {
		c.s.node.Refused(mutex.RefusedRate)
		c.send(goodbyeTo(f.ID, CodeRateLimited, "too many requests from "+account+"; try again later"))
		return nil, "", false
	}
	return p, account, true
}

// welcomeFields adds what every WELCOME carries.
func (c *conn) welcomeFields(fb *frameBuilder, id uint64, secret []byte, ttl time.Duration) {
	fb.u64(TagSession, id)
	fb.bytes(TagSecret, secret)
	fb.u32(TagTTL, millis(int64(ttl)))
	keepalive := ttl / 3
	if m := c.s.cfg.MaxKeepalive; m > 0 && keepalive > m {
		keepalive = m
	}
	fb.u32(TagKeepalive, millis(int64(keepalive)))
	fb.str(TagServer, c.s.cfg.ServerID)
}

// welcome returns the frames of the WELCOME of a resume, answering
// request id: a WELCOME, and MORE frames when its lists do not fit in it.
func (c *conn) welcome(request, id uint64, secret []byte, st mutex.SessionState) [][]byte {
	a := newListAnswer(nil, TypeWelcome, request)
	c.welcomeFields(&a.head, id, secret, st.TTL)
	a.head.u64(TagApplied, st.Applied)
	fb := &a.items
	for _, h := range st.Held {
		at := a.item(TagHeld)
		fb.str(TagKey, h.Key)
		fb.u64(TagToken, h.Token)
		fb.u64(TagRequest, h.Request)
		fb.u8(TagMode, uint8(h.Mode))
		fb.u32(TagCount, h.Count)
		if h.Leased {
			fb.u32(TagLeft, millis(int64(h.LeaseLeft)))
		}
		a.endItem(at)
	}
	for _, p := range st.Parked {
		at := a.item(TagParked)
		fb.str(TagKey, p.Key)
		fb.u64(TagRequest, p.Request)
		a.endItem(at)
	}
	return a.frames()
}

func (c *conn) resume(f *Frame) bool {
	id, okID := f.Uint(TagSession)
	secret, okSecret := f.Get(TagSecret)
	if !okID || !okSecret {
		c.send(goodbyeTo(f.ID, CodeBadRequest, "RESUME needs a session and its secret"))
		return false
	}
	principal, account, ok := c.authenticate(f)
	if !ok {
		return false
	}
	if c.s.cfg.Tokens != nil {
		// A session is resumed by the principal that opened it only.
		if owner, found := c.s.node.SessionAccount(id); found && owner != account {
			c.s.node.Refused(mutex.RefusedUnauthenticated)
			c.s.log.Info("session resumed by another principal", slog.String(logRemote, c.remote),
				slog.String(logPrincipal, account))
			c.send(goodbyeTo(f.ID, CodeUnauthenticated, "authentication failed"))
			return false
		}
	}
	if c.s.cfg.SourceFromCert && c.s.cfg.Tokens != nil {
		// The session is charged to the principal, and named after the
		// certificate it was opened with: a resume needs both.
		name, _ := tlsconf.PeerName(c.nc)
		if owner, found := c.s.node.SessionName(id); found && owner != name {
			c.send(goodbyeTo(f.ID, CodeUnknownSession, "no such session, or a wrong secret"))
			return false
		}
	}
	// The node checks, with the secret, the account a client proved with
	// a token or a certificate; an IP address proves nothing.
	bound := ""
	if c.s.cfg.Tokens != nil || c.s.cfg.SourceFromCert {
		bound = account
	}
	hash := sha256.Sum256(secret)
	// The connection the session has now may be handling a request this
	// very moment: let it finish, and handle nothing after, before the
	// WELCOME says what the session holds and which requests applied.
	// It stays stopped (its handling held) until it has its GOODBYE, so
	// that it cannot end its connection without one; what the session
	// owes it for the requests it handled goes there ahead of the
	// GOODBYE, also when it waits for the log.
	var stopped *conn
	if route, ok := c.s.node.SessionRoute(id, hash, bound); ok {
		if s, _ := route.(*sess); s != nil {
			if old := s.attached(); old != nil && old != c {
				old.stop()
				stopped = old
				s.awaitWritten(old)
			}
		}
	}
	resumeDone := func() {
		if stopped != nil {
			stopped.handling.Unlock()
			stopped = nil
		}
	}
	defer resumeDone()
	var s *sess
	var old *conn
	live := c.s.node.Resume(id, hash, bound, c.remote, func(st mutex.SessionState, route mutex.Route, missed []mutex.Output) mutex.Route {
		s, _ = route.(*sess)
		if s == nil {
			s = &sess{srv: c.s, id: id, name: st.Name}
		}
		s.principal, s.account = principal, account
		welcome := c.welcome(f.ID, id, secret, st)
		s.mu.Lock()
		old, s.conn = s.conn, c
		items := make([]item, 0, len(welcome)+len(missed)+len(s.items))
		for _, w := range welcome {
			items = append(items, item{raw: w})
		}
		for _, o := range missed {
			items = append(items, item{out: o})
		}
		s.items = append(items, s.items...)
		s.mu.Unlock()
		return s
	})
	if live == nil {
		if !c.s.leading() {
			c.send(c.s.notLeader(f.ID))
			return false
		}
		c.send(goodbyeTo(f.ID, CodeUnknownSession, "no such session, or a wrong secret"))
		return false
	}
	s.live.Store(live) // another connection's resume of the session may read it
	c.sess = s
	if old != nil && old != c {
		old.send(goodbye(CodeSessionEnded, "the session was resumed on another connection"))
		resumeDone() // before the close, which may wait for the old connection's goroutine
		old.close()
	}
	s.Flush()
	return true
}

// certName returns the name of the connection's client certificate, or
// says GOODBYE, answering request id, and reports false when it has none.
func (c *conn) certName(id uint64) (string, bool) {
	name, ok := tlsconf.PeerName(c.nc)
	if !ok {
		c.send(goodbyeTo(id, CodeBadRequest, "the client certificate gives no name to use as the session's"))
	}
	return name, ok
}

// forbid refuses request id, for a key (or prefix) outside the
// principal's.
func (c *conn) forbid(id uint64, key string) {
	c.s.node.Refused(mutex.RefusedForbidden)
	c.sess.queueRaw(refused(nil, id, CodeForbidden, fmt.Sprintf("%s may not use %q", c.sess.account, key)))
}

// peerIP returns the IP address of c's peer, without the port.
func peerIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// OverLimitGoodbye returns the GOODBYE over_limit that a connection the
// server has no room for gets, after its preface.
func OverLimitGoodbye() []byte {
	return goodbye(CodeOverLimit, "the server has as many connections as it allows; try again later")
}

// goodbye returns a GOODBYE frame that answers no request (id 0).
func goodbye(code Code, message string) []byte { return goodbyeTo(0, code, message) }

// goodbyeTo returns a GOODBYE frame answering request id: the HELLO or
// RESUME it refuses.
func goodbyeTo(id uint64, code Code, message string) []byte {
	return goodbyeLeader(id, code, message, "")
}

// goodbyeLeader returns a GOODBYE frame answering request id, naming the
// leader when leader is not empty.
func goodbyeLeader(id uint64, code Code, message, leader string) []byte {
	fb := begin(nil, TypeGoodbye, id)
	fb.u8(TagCode, uint8(code))
	fb.str(TagMessage, clip(message))
	if leader != "" && len(leader) <= maxSize[TagLeader] {
		fb.str(TagLeader, leader)
	}
	return fb.end()
}

// refused returns a REFUSED frame answering id.
func refused(b []byte, id uint64, code Code, message string) []byte {
	fb := begin(b, TypeRefused, id)
	fb.u8(TagCode, uint8(code))
	fb.str(TagMessage, clip(message))
	return fb.end()
}

// clip cuts a message to the field's limit.
func clip(m string) string {
	if len(m) > maxSize[TagMessage] {
		return m[:maxSize[TagMessage]]
	}
	return m
}

// Tags each request may carry.
var (
	helloTags    = tagSet(TagName, TagTTL, TagCredential)
	resumeTags   = tagSet(TagSession, TagSecret, TagCredential)
	acquireTags  = tagSet(TagKey, TagWait, TagLease, TagDelay, TagMode, TagLimit, TagPriority, TagReentrant, TagOwner, TagNote)
	releaseTags  = tagSet(TagKey, TagToken, TagLapse)
	renewTags    = tagSet(TagKey, TagToken, TagLease)
	cancelTags   = tagSet(TagTarget)
	describeTags = tagSet(TagKey)
	watchTags    = tagSet(TagKey)
	noTags       = tagSet()
	// requestTags are the tags of each request of an open session, by
	// frame type; nil: not such a request.
	requestTags = [...]*[256]bool{TypeAcquire: acquireTags, TypeRelease: releaseTags, TypeRenew: renewTags,
		TypeCancel: cancelTags, TypeDescribe: describeTags, TypePing: noTags, TypeClose: noTags, TypeWatch: watchTags}
)

// changesTable reports the requests whose ids must increase.
var changesTable = [256]bool{TypeAcquire: true, TypeRelease: true, TypeRenew: true, TypeCancel: true, TypeClose: true}

func tagSet(tags ...Tag) *[256]bool {
	var s [256]bool
	for _, t := range tags {
		s[t] = true
	}
	return &s
}

// unknownField returns the first field of f not in allowed.
func unknownField(f *Frame, allowed *[256]bool) (Tag, bool) {
	for _, fl := range f.Fields {
		if !allowed[fl.Tag] {
			return fl.Tag, true
		}
	}
	return 0, false
}

// handle serves one frame of an open session and reports whether the
// connection goes on.
func (c *conn) handle(f *Frame) bool {
	s := c.sess
	var allowed *[256]bool
	if int(f.Type) < len(requestTags) {
		allowed = requestTags[f.Type]
	}
	if allowed == nil {
		c.refuseFrame(fmt.Errorf("%w: frame type %#02x is not a request of an open session", ErrProtocol, uint8(f.Type)))
		return false
	}
	if tag, ok := unknownField(f, allowed); ok {
		s.queueRaw(unsupported(f.ID, tag))
		return true
	}
	if f.ID == 0 && changesTable[f.Type] {
		// 0 is never above the highest id applied; duplicate would tell
		// the client that the request had taken effect.
		s.queueRaw(refused(nil, f.ID, CodeBadRequest, "request ids start at 1"))
		return true
	}
	if f.Type != TypePing && f.Type != TypeClose && !c.s.cfg.Rates.Allow(s.account) {
		c.s.node.Refused(mutex.RefusedRate)
		s.queueRaw(refused(nil, f.ID, CodeRateLimited, "too many requests from "+s.account+"; try again later"))
		return true
	}
	cmd := mutex.Command{Session: s.id, Request: f.ID}
	var key []byte // the command's key, in the frame: the node makes cmd.Key of it
	switch f.Type {
	case TypePing:
		if !c.s.leading() {
			c.flushThenSend(c.s.notLeader(0))
			return false
		}
		s.queueRaw(okFrame(nil, f.ID))
		return true
	case TypeWatch:
		prefix, _ := f.Get(TagKey)
		if c.s.cfg.Tokens != nil && !s.principal.MayWatch(string(prefix)) {
			c.forbid(f.ID, string(prefix))
			return true
		}
		c.s.watch.add(&watch{s: s, id: f.ID, prefix: string(prefix)})
		s.queueRaw(okFrame(nil, f.ID))
		return true
	case TypeDescribe:
		return c.describe(f)
	case TypeAcquire:
		var msg string
		if key, msg = c.acquire(f, &cmd); msg != "" {
			s.queueRaw(refused(nil, f.ID, CodeBadRequest, msg))
			return true
		}
		if c.s.cfg.Tokens != nil && !s.principal.MayUse(string(key)) {
			c.forbid(f.ID, string(key))
			return true
		}
	case TypeRelease, TypeRenew:
		cmd.Op = mutex.OpRelease
		if f.Type == TypeRenew {
			cmd.Op = mutex.OpRenew
			if ms, ok := f.Uint(TagLease); ok {
				cmd.Lease = time.Duration(ms) * time.Millisecond
			}
		}
		if l, ok := f.Uint(TagLapse); ok {
			if l > 1 {
				s.queueRaw(refused(nil, f.ID, CodeBadRequest, "lapse must be 0 or 1"))
				return true
			}
			cmd.Lapse = l == 1
		}
		k, okKey := f.Get(TagKey)
		token, okToken := f.Uint(TagToken)
		if !okKey || !okToken || mutex.ValidateKey(string(k)) != nil {
			s.queueRaw(refused(nil, f.ID, CodeBadRequest, "a key of 1 to 127 bytes and a token are needed"))
			return true
		}
		key, cmd.Token = k, token
	case TypeCancel:
		target, ok := f.Uint(TagTarget)
		if !ok {
			s.queueRaw(refused(nil, f.ID, CodeBadRequest, "CANCEL needs a target"))
			return true
		}
		if c.s.watch.cancel(s, target) {
			s.queueRaw(okFrame(nil, f.ID))
			return true
		}
		cmd.Op, cmd.Target = mutex.OpCancel, target
	case TypeClose:
		cmd.Op = mutex.OpCloseSession
	}
	res, _, delivered := c.s.node.ApplySessionKey(cmd, key)
	if res.Status == mutex.StatusUnavailable {
		c.flushThenSend(c.s.notLeader(0))
		return false
	}
	if !delivered {
		c.flushThenSend(goodbye(CodeSessionExpired, "the session has expired"))
		return false
	}
	if f.Type == TypeClose && res.Status == mutex.StatusOK { // a CLOSE refused (duplicate) changed nothing
		c.s.watch.dropSession(s)
		s.endBatch()
		s.closeAfterFlush()
		s.awaitWritten(c)
		return false
	}
	return true
}

// unsupported is the REFUSED of a request with a field tag the server
// does not know.
func unsupported(id uint64, tag Tag) []byte {
	return refused(nil, id, CodeUnsupported, fmt.Sprintf("field %#02x is not supported here", tag))
}

// describe returns the answer to a DESCRIBE frame.
func (c *conn) describe(f *Frame) bool {
	s := c.sess
	key, ok := f.Get(TagKey)
	if !ok || mutex.ValidateKey(string(key)) != nil {
		s.queueRaw(refused(nil, f.ID, CodeBadRequest, "DESCRIBE needs a key of 1 to 127 bytes"))
		return true
	}
	if c.s.cfg.Tokens != nil && !s.principal.MayUse(string(key)) {
		c.forbid(f.ID, string(key))
		return true
	}
	if c.s.node.Linearize() != nil {
		c.flushThenSend(c.s.notLeader(0))
		return false
	}
	s.queueRaws(info(f.ID, c.s.node.Describe(string(key)), c.s.node.Now()))
	return true
}

// acquire fills cmd, but for its key, from an ACQUIRE frame; it returns
// the key (in the frame) and why the frame is a bad request, or "".
func (c *conn) acquire(f *Frame, cmd *mutex.Command) ([]byte, string) {
	key, ok := f.Get(TagKey)
	if !ok || mutex.ValidateKey(string(key)) != nil {
		return nil, "ACQUIRE needs a key of 1 to 127 bytes"
	}
	cmd.Op, cmd.Source, cmd.RemoteAddr = mutex.OpAcquire, c.sess.name, c.remote
	if ms, ok := f.Uint(TagWait); ok {
		if ms == 0 {
			cmd.Try = true
		} else {
			cmd.Wait = time.Duration(ms) * time.Millisecond
		}
	}
	if ms, ok := f.Uint(TagLease); ok {
		cmd.Lease = time.Duration(ms) * time.Millisecond
	}
	cmd.Delay = c.s.cfg.LockDelay
	if ms, ok := f.Uint(TagDelay); ok {
		if cmd.Delay = time.Duration(ms) * time.Millisecond; cmd.Delay > mutex.MaxLockDelay {
			return nil, fmt.Sprintf("delay_ms is at most %d", mutex.MaxLockDelay.Milliseconds())
		}
	}
	if m, ok := f.Uint(TagMode); ok {
		if m > uint64(mutex.Shared) {
			return nil, "mode must be 0 (exclusive) or 1 (shared)"
		}
		cmd.Mode = mutex.Mode(m)
	}
	if l, ok := f.Uint(TagLimit); ok {
		if cmd.Mode == mutex.Shared && l > 1 {
			return nil, "a shared acquire takes no limit"
		}
		cmd.Limit = uint32(l)
	}
	if p, ok := f.Uint(TagPriority); ok {
		cmd.Priority = int32(uint32(p))
	}
	if r, ok := f.Uint(TagReentrant); ok {
		if r > 1 {
			return nil, "reentrant must be 0 or 1"
		}
		cmd.Reentrant = r == 1
	}
	if o, ok := f.Get(TagOwner); ok {
		cmd.Owner = string(o)
	}
	if n, ok := f.Get(TagNote); ok {
		if !utf8.Valid(n) {
			return nil, "note must be UTF-8"
		}
		cmd.Note = string(n)
	}
	return key, ""
}

// okFrame appends an OK frame answering id.
func okFrame(b []byte, id uint64) []byte {
	fb := begin(b, TypeOK, id)
	return fb.end()
}

// info returns the frames of the INFO of k, read at now, answering id: an
// INFO, and MORE frames when its holders do not fit in it.
func info(id uint64, k mutex.KeyInfo, now time.Time) [][]byte {
	a := newListAnswer(nil, TypeInfo, id)
	a.head.str(TagKey, k.Key)
	a.head.u32(TagQueue, uint32(k.Queue))
	if k.DelayLeft > 0 {
		a.head.u32(TagLeft, millis(int64(k.DelayLeft)))
	}
	fb := &a.items
	for _, h := range k.Holders {
		at := a.item(TagHolder)
		fb.u64(TagToken, h.Token)
		fb.str(TagName, h.Source)
		fb.u64(TagSession, h.Session)
		fb.u32(TagHeldFor, millis(int64(h.Held(now))))
		fb.u8(TagMode, uint8(h.Mode))
		fb.u32(TagCount, h.Count)
		if h.Leased {
			fb.u32(TagLeft, millis(int64(h.LeaseLeft)))
		}
		if h.Note != "" {
			fb.str(TagNote, h.Note)
		}
		a.endItem(at)
	}
	return a.frames()
}
