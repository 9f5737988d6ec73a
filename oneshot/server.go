package oneshot

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/internal/ratelimit"
	"github.com/locking-center/locking-center/internal/serve"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/locking-center/locking-center/mutex"
)

// Defaults of ServerConfig.
const (
	DefaultHeaderTimeout = 10 * time.Second
)

// Log attribute keys.
const (
	logKey    = "key"
	logRemote = "remote"
	logAction = "action"
	logError  = "error"
)

// aLongTimeAgo is a deadline in the past: setting it wakes a blocked Read.
var aLongTimeAgo = time.Unix(1, 0)

// The three one-byte answers, shared and never written to.
var (
	answerOKBytes     = []byte{AnswerOK}
	answerFailedBytes = []byte{AnswerFailed}
	answerBusyBytes   = []byte{AnswerBusy}
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// HeaderTimeout bounds the time for a request's bytes to arrive once
	// the connection is accepted (a listener from Listen holds a silent
	// connection for about a second before that), and the time a granted
	// client has to close after its '+'. Zero means DefaultHeaderTimeout
	// (10 s). It never applies to a parked request.
	HeaderTimeout time.Duration
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Handoff takes the connections that begin with another protocol's
	// first byte; nil answers them '-' as malformed.
	Handoff *Handoff
	// TLS, when set, makes the port speak TLS with this config: each
	// connection's handshake and request must arrive within the header
	// timeout, in a worker (never in the accept loop). Nil: plain TCP.
	TLS *tls.Config
	// SourceFromCert takes the source of every lock and try-lock from the
	// client's verified certificate (tlsconf.PeerName), in place of the
	// request's, and charges the lock to it (mutex.Command.Account). A
	// connection without such a certificate is answered '-'. It needs
	// TLS with client certificates required.
	SourceFromCert bool
	// Forward, for a node of a cluster (mutex.Node.Replicated), takes a v1
	// connection that arrives while the node does not lead, with the bytes
	// read so far, in a worker goroutine, and serves it elsewhere (the
	// leader); the server closes the connection once Forward returns. It
	// returns false, having used nothing of the connection, to have the
	// request served here after all. Nil serves every request here, and a
	// follower then answers none of them.
	Forward func(c net.Conn, got []byte) bool
	// V1Allowed, when set, says whether a v1 request from ip is served; one
	// that is not is answered '-' (with authentication on, v1 is off but
	// for the networks allowed: docs/security.md). Nil serves every one.
	V1Allowed func(ip net.IP) bool
	// Rates limits each client address's v1 requests; one over the rate is
	// answered '-'. Nil: no limit.
	Rates *ratelimit.Rates
	// Gate caps the connections this port (a client port) may have open,
	// with the other ports sharing it; one over the cap is answered '-'
	// (or the handoff's OverLimit) and closed. Nil: no cap.
	Gate *serve.Gate

	// parkHook, for tests, is called by a parked request's goroutine
	// before its first read (left false), and after a read that met the
	// end of the connection, before the request is cancelled (left true).
	parkHook func(w *waiter, left bool)
}

// Handoff passes a connection whose first byte is First, which no v1
// request begins with, to Serve, in a worker goroutine, with the bytes
// already read, and the function that ends it. Serve owns the connection
// until it returns; the server closes it then, unless Serve reports keep:
// the connection then stays open, and counts against the server's Gate,
// until Serve's side calls finish (once or more: the second call does
// nothing). The server cuts it at Close either way.
type Handoff struct {
	First byte
	Serve func(c net.Conn, got []byte, finish func(net.Conn)) (keep bool)
	// OverLimit is what a connection of that protocol gets when the
	// server has no room for it (ServerConfig.Gate); nil: nothing.
	OverLimit []byte
}

// Validate reports a configuration that cannot work.
func (c ServerConfig) Validate() error {
	if c.HeaderTimeout < 0 {
		return errors.New("oneshot: header timeout must not be negative")
	}
	if c.SourceFromCert && c.TLS == nil {
		return errors.New("oneshot: the source from the certificate needs TLS")
	}
	if c.Handoff != nil && (c.Handoff.First >= byte(ActionLock) && c.Handoff.First <= byte(ActionTryLock) || c.Handoff.Serve == nil) {
		return errors.New("oneshot: a handoff needs a first byte that is not a v1 action, and a Serve")
	}
	return nil
}

// Server answers protocol v1 of the mutex port from a Node.
type Server struct {
	node       *mutex.Node
	timeout    time.Duration
	log        *slog.Logger
	srv        *serve.Server
	deliveries *deliveries
	handoff    *Handoff
	forward    func(net.Conn, []byte) bool
	fromCert   bool // ServerConfig.SourceFromCert
	v1Allowed  func(net.IP) bool
	rates      *ratelimit.Rates
	parkHook   func(*waiter, bool) // ServerConfig.parkHook
	spare      sync.Pool           // of *waiter, see newWaiter
}

// NewServer returns a server for n. It serves nothing until Serve.
func NewServer(n *mutex.Node, cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	s := &Server{node: n, timeout: cfg.HeaderTimeout, log: serve.Discard(cfg.Logger), handoff: cfg.Handoff,
		forward: cfg.Forward, fromCert: cfg.SourceFromCert, v1Allowed: cfg.V1Allowed, rates: cfg.Rates,
		parkHook: cfg.parkHook}
	s.srv = serve.NewServer(s.open, s.log)
	if cfg.TLS != nil {
		// A session's grants are written by the goroutine that granted
		// them: they must never wait for a client that does not read.
		s.srv.UseTLS(cfg.TLS, cfg.HeaderTimeout)
	}
	s.srv.Limit(cfg.Gate, false, s.refuseConn)
	s.deliveries = newDeliveries(n, cfg.HeaderTimeout, s.srv.Finish, func(g grant) {
		s.log.Debug("grant not received, passed on", slog.String(logRemote, g.remote))
	})
	return s, nil
}

// Serve accepts connections on ln until ctx ends or Close is called, then
// returns nil. It closes ln on return. Errors: ErrClosed after Close.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	err := s.srv.Serve(ctx, ln)
	if errors.Is(err, serve.ErrClosed) {
		return ErrClosed
	}
	return err
}

// Close stops every listener, cuts every open connection (parked requests
// are withdrawn) and waits for the server's goroutines to end. It is safe
// to call more than once.
func (s *Server) Close() error {
	s.srv.Close()
	s.deliveries.stop()
	return nil
}

// open starts the service of c in the accept loop, in accept order. When
// the whole request has already arrived (with Listen, nearly always), it is
// read and applied to the table there, so requests enter the table in the
// order they reached the server and not in the order goroutines happen to
// run; and when answering takes no waiting (an unlock, a grant that needs
// no journal write, a busy try-lock) it is answered there too, with no
// goroutine handed the connection. What must wait (a parked request, the
// journal, a request still on its way, which is read under the header
// timeout) is returned as work for a worker. See serve.ServerOpener.
//
// A node of a cluster does no more than that read in the accept loop:
// every command waits for a quorum, so every request goes to a worker,
// which forwards it when the node does not lead. A TLS connection goes to
// a worker at once, for its handshake.
func (s *Server) open(c net.Conn) (work func() bool, keep bool) {
	if tc, ok := c.(*tls.Conn); ok {
		return func() bool { return s.handshake(tc) }, false
	}
	r, err := readNow(c, maxRequestLen+1)
	defer r.free()
	if err != nil {
		return nil, false // gone already
	}
	buf := r.got()
	if h := s.handoff; h != nil && len(buf) > 0 && buf[0] == h.First {
		got := append([]byte(nil), buf...)
		return func() bool { return h.Serve(c, got, s.srv.Finish) }, false
	}
	if s.node.Replicated() {
		got := append([]byte(nil), buf...)
		return func() bool { return s.replicated(c, got) }, false
	}
	req, used, derr := DecodeRequest(buf)
	switch {
	case derr == nil && used == len(buf):
		return s.serve(c, req, false)
	case derr == nil || !errors.Is(derr, errIncomplete):
		writeAnswer(c, answerFailedBytes)
		return nil, false
	}
	got := string(buf)
	return func() bool { return s.handle(c, got, time.Now().Add(s.timeout)) }, false
}

// handshake serves, in a worker, a TLS connection: its handshake and its
// request must arrive within one header timeout. It reports whether c
// stays open.
func (s *Server) handshake(c *tls.Conn) bool {
	deadline := time.Now().Add(s.timeout)
	c.SetDeadline(deadline)
	if err := c.Handshake(); err != nil {
		s.log.Debug("TLS handshake failed", slog.String(logRemote, c.RemoteAddr().String()), slog.Any(logError, err))
		return false
	}
	c.SetWriteDeadline(time.Time{})
	if s.node.Replicated() {
		return s.replicated(c, nil)
	}
	return s.handle(c, "", deadline)
}

// replicated serves, in a worker, a connection of a node of a cluster: it
// forwards it while the node does not lead, and otherwise serves it as
// handle does. It reports whether c stays open.
func (s *Server) replicated(c net.Conn, got []byte) bool {
	if s.forward != nil && !s.node.IsLeader() {
		if got == nil && s.handoff != nil {
			// Nothing had arrived at accept time: the first byte says
			// which protocol.
			c.SetReadDeadline(time.Now().Add(s.timeout))
			var b [1]byte
			if n, _ := c.Read(b[:]); n == 0 {
				return false
			}
			got = b[:]
			if got[0] == s.handoff.First {
				return s.handoff.Serve(c, got, s.srv.Finish)
			}
		}
		if s.forward(c, got) {
			return false
		}
	}
	return s.handle(c, string(got), time.Now().Add(s.timeout))
}

// grant is a v1 grant on its way to its client.
type grant struct {
	key    string
	token  uint64
	remote string
}

// handle serves, in a worker, a connection whose request had not all
// arrived at accept time; got holds the bytes that had. The rest must
// arrive by deadline. It reports whether c stays open.
func (s *Server) handle(c net.Conn, got string, deadline time.Time) bool {
	c.SetReadDeadline(deadline)
	if got == "" && s.handoff != nil {
		// Nothing had arrived at accept time (a listener without
		// TCP_DEFER_ACCEPT): the first byte says which protocol.
		var buf [maxRequestLen + 1]byte
		n, err := c.Read(buf[:])
		if n == 0 {
			return false
		}
		if buf[0] == s.handoff.First {
			return s.handoff.Serve(c, buf[:n], s.srv.Finish)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return false
		}
		got = string(buf[:n])
	}
	req, err := readRequest(c, got)
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			writeAnswer(c, answerFailedBytes)
		}
		return false
	}
	work, keep := s.serve(c, req, true)
	if work != nil {
		return work()
	}
	return keep
}

// serve applies req to the table and answers it if that takes no waiting;
// otherwise it returns the work that waits and answers. keep tells, when
// there is no work left, whether c stays open. deadline tells whether c
// has a read deadline set.
func (s *Server) serve(c net.Conn, req Request, deadline bool) (work func() bool, keep bool) {
	if (s.v1Allowed != nil || s.rates != nil) && !s.admit(c) {
		writeAnswer(c, answerFailedBytes)
		return nil, false
	}
	if s.fromCert && (req.Action == ActionLock || req.Action == ActionTryLock) {
		name, ok := tlsconf.PeerName(c)
		if !ok {
			writeAnswer(c, answerFailedBytes)
			return nil, false
		}
		req.Source = name
	}
	switch req.Action {
	case ActionLock:
		w := s.newWaiter(c)
		cmd := s.acquire(c, req)
		res, p := s.node.ApplyWatched(cmd, w.wakeFn, w.goneFn)
		if res.Status != mutex.StatusParked {
			s.spareWaiter(w)
		}
		switch res.Status {
		case mutex.StatusGranted:
			return s.grant(c, grant{key: req.Key, token: res.Token, remote: cmd.RemoteAddr}, p)
		case mutex.StatusParked:
			w.g = grant{key: req.Key, remote: cmd.RemoteAddr}
			w.ticket = res.Ticket
			return func() bool { return s.park(w, deadline) }, false
		case mutex.StatusUnavailable:
			return nil, false // unanswered: the client asks again
		}
		writeAnswer(c, answerFailedBytes) // a limit mismatch: the key is a semaphore of sessions
		return nil, false
	case ActionTryLock:
		cmd := s.acquire(c, req)
		cmd.Try = true
		res, p := s.node.Apply(cmd)
		switch res.Status {
		case mutex.StatusGranted:
			return s.grant(c, grant{key: req.Key, token: res.Token, remote: cmd.RemoteAddr}, p)
		case mutex.StatusBusy:
			writeAnswer(c, answerBusyBytes)
		case mutex.StatusUnavailable:
		default:
			writeAnswer(c, answerFailedBytes)
		}
		return nil, false
	case ActionUnlock:
		res, p := s.node.Apply(mutex.Command{Op: mutex.OpRelease, Key: req.Key})
		if res.Status == mutex.StatusUnavailable {
			return nil, false
		}
		if res.Status == mutex.StatusNotOwned || res.Status == mutex.StatusStale {
			// A session holds it, not v1's to release; or a grant made
			// after this unlock was received holds it (a late unlock,
			// say one a paused leader of a cluster committed): not this
			// unlock's to end.
			writeAnswer(c, answerFailedBytes)
			return nil, false
		}
		// The ended grant's client need no longer be heard from.
		if held, ok := s.deliveries.take(res.Token); ok {
			s.srv.Finish(held)
		}
		return s.answerReleaseNow(c, p)
	case ActionResetKey:
		res, p := s.node.Apply(mutex.Command{Op: mutex.OpResetKey, Key: req.Key})
		if res.Status == mutex.StatusUnavailable {
			return nil, false
		}
		return s.answerReleaseNow(c, p)
	}
	return func() bool { // ActionResetSource walks the whole table: not in the accept loop
		res, p := s.node.Apply(mutex.Command{Op: mutex.OpResetSource, Source: req.Source})
		if res.Status != mutex.StatusUnavailable {
			s.answerRelease(c, p)
		}
		return false
	}, false
}

// refuseConn answers a connection the gate has no room for, in the accept
// loop: with what has arrived already (it never waits), '-' for v1, or the
// handoff's OverLimit for its protocol.
func (s *Server) refuseConn(c net.Conn) {
	defer s.node.Refused(mutex.RefusedConnections) // once answered
	r, _ := readNow(c, 1)
	defer r.free()
	if h := s.handoff; h != nil && len(r.got()) == 1 && r.got()[0] == h.First {
		if h.OverLimit != nil {
			c.Write(h.OverLimit)
		}
		return
	}
	writeAnswer(c, answerFailedBytes)
}

// admit reports whether a v1 request on c may be served: its network is
// allowed v1, and its address is within its rate. A refusal is counted.
func (s *Server) admit(c net.Conn) bool {
	ip := peerIP(c)
	if s.v1Allowed != nil && !s.v1Allowed(ip) {
		s.node.Refused(mutex.RefusedV1)
		return false
	}
	if !s.rates.Allow(ip.String()) {
		s.node.Refused(mutex.RefusedRate)
		return false
	}
	return true
}

// peerIP returns the IP address of c's peer; nil when it has none.
func peerIP(c net.Conn) net.IP {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP
	}
	return nil
}

// answerReleaseNow answers '+' at once when p is already durable, and
// otherwise returns the work that waits for it.
func (s *Server) answerReleaseNow(c net.Conn, p mutex.Pending) (work func() bool, keep bool) {
	if p == nil {
		writeAnswer(c, answerOKBytes)
		return nil, false
	}
	return func() bool {
		s.answerRelease(c, p)
		return false
	}, false
}

// grant delivers a grant at once when it needs no journal wait, and
// otherwise returns the work that waits for the journal and delivers it.
func (s *Server) grant(c net.Conn, g grant, p mutex.Pending) (work func() bool, keep bool) {
	if p != nil {
		return func() bool { return s.deliver(c, g, p) }, false
	}
	return nil, s.deliver(c, g, nil)
}

// answerRelease answers '+' once the release is durable. A release whose
// write failed has still taken effect in memory; the journal counts it.
func (s *Server) answerRelease(c net.Conn, p mutex.Pending) {
	if err := mutex.WaitPending(p); err != nil {
		s.log.Warn("release not durable", slog.Any(logError, err))
	}
	writeAnswer(c, answerOKBytes)
}

// acquire builds the table's command for req on c: the source defaults to
// the peer IP, which is also the account charged for it, unless the
// source is from the certificate (SourceFromCert): that is charged. Its
// wait is bound to the connection.
func (s *Server) acquire(c net.Conn, req Request) mutex.Command {
	remote := c.RemoteAddr().String()
	account := remote
	if host, _, err := net.SplitHostPort(remote); err == nil {
		// The peer's IP address, as in remote (without an IPv6 zone).
		account, _, _ = strings.Cut(host, "%")
	}
	source := req.Source
	if source == "" {
		source = account
	}
	if s.fromCert {
		account = source
	}
	return mutex.Command{Op: mutex.OpAcquire, Key: req.Key, Source: source, Account: account, RemoteAddr: remote,
		ConnBound: true}
}

// Who writes a parked request's '+', and how it went.
const (
	plusUnsent  = iota // nobody yet
	plusWritten        // the granting goroutine wrote it
	plusFailed         // the granting goroutine could not write it
	plusWaiter         // the waiter's own goroutine answers
)

// waiter is a parked lock request's connection.
type waiter struct {
	s      *Server
	c      net.Conn
	g      grant // key and remote; the token comes with the grant
	ticket uint64
	done   chan struct{} // closed by wake
	left   atomic.Bool   // a read of c met its end: the client left
	wakeFn mutex.Waker   // w.wake, bound once
	goneFn func() bool   // w.gone, bound once

	mu   sync.Mutex
	plus int           // plusUnsent, plusWritten, plusFailed or plusWaiter
	ev   mutex.Event   // set by wake
	p    mutex.Pending // set by wake
	woke bool
}

// newWaiter returns the waiter of a lock request on c, one that an
// earlier request did not park with when there is one (spareWaiter), so
// that a lock granted at once allocates none.
func (s *Server) newWaiter(c net.Conn) *waiter {
	w, _ := s.spare.Get().(*waiter)
	if w == nil {
		w = &waiter{s: s, done: make(chan struct{})}
		w.wakeFn, w.goneFn = w.wake, w.gone
	}
	w.c = c
	return w
}

// spareWaiter keeps w, whose request did not park, for the next lock
// request. A single node keeps a request's waker and probe only when it
// parks, so w is as new; a node of a cluster may still call those of a
// proposal whose wait failed, so its waiters are never kept.
func (s *Server) spareWaiter(w *waiter) {
	if s.node.Replicated() {
		return
	}
	w.c = nil
	s.spare.Put(w)
}

// wake runs in the goroutine that granted or withdrew the request, once
// the node's lock is free. A grant that needs no journal wait gets its
// '+' written right there, and our side of the connection ended with it
// (writeGrant): the next holder learns of its grant without waiting for
// its own goroutine to be scheduled. Then the waiter's goroutine is woken
// from its read, and leaves the connection to the deliveries (see await)
// once it no longer reads; a read that took the client's reset first
// answers for the grant itself (see park).
func (w *waiter) wake(ev mutex.Event, p mutex.Pending) {
	w.mu.Lock()
	w.ev, w.p, w.woke = ev, p, true
	if ev.Kind == mutex.EventGranted && p == nil && w.plus == plusUnsent {
		w.plus = plusFailed
		if writeGrant(w.c) {
			w.plus = plusWritten
		}
	}
	w.mu.Unlock()
	close(w.done)
	w.c.SetReadDeadline(aLongTimeAgo)
}

// gone reports, without waiting, whether the client has left: a read of
// the connection met its end, or its end (or a reset) is queued on the
// socket (serve.PeerGone). The node asks it, while the request waits,
// before it passes the key to the request: a request whose client left is
// withdrawn instead, and the key goes to the next in line.
func (w *waiter) gone() bool { return w.left.Load() || serve.PeerGone(w.c) }

// outcome returns what wake was told, and whether it was called yet.
func (w *waiter) outcome() (mutex.Event, mutex.Pending, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ev, w.p, w.woke
}

// answer makes the waiter's goroutine the one that answers, unless the
// '+' was already written or tried; it returns the state it found.
func (w *waiter) answer() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := w.plus
	if found == plusUnsent {
		w.plus = plusWaiter
	}
	return found
}

// park watches a parked request's connection until the request is granted
// or withdrawn, and answers it. It reports whether c stays open.
func (s *Server) park(w *waiter, deadline bool) bool {
	if s.parkHook != nil {
		s.parkHook(w, false)
	}
	c := w.c
	if deadline {
		// No timeout while parked. Clearing the header deadline could undo
		// a wake that came first, so the state is checked before every
		// read.
		c.SetReadDeadline(time.Time{})
	}
	keepAlive(c)
	var b [1]byte
	for {
		ev, p, woke := w.outcome()
		if !woke {
			_, rerr := c.Read(b[:])
			if errors.Is(rerr, os.ErrDeadlineExceeded) {
				continue // woken: the state has changed
			}
			if rerr != nil {
				w.left.Store(true)
				if s.parkHook != nil {
					s.parkHook(w, true)
				}
			}
			// The peer left, failed, or sent bytes it must not send.
			if found := w.answer(); found != plusUnsent {
				// Granted in the meantime, and its '+' written or tried.
				// A read that failed took the socket's error, the one
				// sign that the '+' was not received: the grant passes on.
				if found == plusWritten && readFailed(rerr) {
					ev, _, _ := w.outcome()
					s.node.Revoke(w.g.key, ev.Token)
					s.log.Debug("grant not received, passed on", slog.String(logRemote, w.g.remote))
					return false
				}
				continue
			}
			res, _ := s.node.Apply(mutex.Command{Op: mutex.OpCancel, Ticket: w.ticket})
			if res.Status != mutex.StatusOK {
				// Granted or withdrawn as the peer left: the wake is
				// under way. A grant is passed on.
				<-w.done
				if ev, _, _ := w.outcome(); ev.Kind == mutex.EventGranted {
					s.node.Revoke(w.g.key, ev.Token)
				}
			} else if rerr == nil {
				writeAnswer(c, answerFailedBytes)
			}
			s.log.Debug("parked request withdrawn", slog.String(logRemote, w.g.remote), slog.Any(logError, rerr))
			return false
		}
		if ev.Kind != mutex.EventGranted {
			switch ev.Reason {
			case mutex.ReasonRestart: // the node stopped leading: unanswered
			case mutex.ReasonCancelled: // its client left (gone): unanswered, as after its end of stream
			default:
				writeAnswer(c, answerFailedBytes) // withdrawn by a reset of its source
			}
			return false
		}
		g := w.g
		g.token = ev.Token
		switch w.answer() {
		case plusUnsent:
			return s.deliver(c, g, p)
		case plusWritten:
			return s.await(c, g)
		}
		s.node.Revoke(g.key, g.token) // plusFailed
		return false
	}
}

// deliver answers a grant with '+' once it is durable; it blocks only for
// a journal Pending. A grant that cannot be made durable is answered '-'
// and undone; so is one whose '+' cannot be written. It reports whether c
// stays open (see await).
func (s *Server) deliver(c net.Conn, g grant, p mutex.Pending) bool {
	if err := mutex.WaitPending(p); err != nil {
		s.node.Revoke(g.key, g.token)
		writeAnswer(c, answerFailedBytes)
		s.log.Warn("grant not durable, released", slog.Any(logError, err))
		return false
	}
	if !writeGrant(c) {
		s.node.Revoke(g.key, g.token)
		return false
	}
	return s.await(c, g)
}

// await leaves c, whose grant's '+' was written and our side ended with
// it (writeGrant), with the deliveries, to learn whether the '+' reached
// the client's program. A client that gave up in the same instant (its
// deadline fired, its context was cancelled) closes with the '+' unread or
// before it arrived; the grant is then undone and the key passes on,
// instead of staying with a client that believes it failed. A connection
// that cannot be half-closed (no socket beneath) cannot tell: it is
// closed. It reports whether c stays open.
func (s *Server) await(c net.Conn, g grant) bool {
	if !serve.HalfCloses(c) {
		return false
	}
	s.deliveries.add(c, g)
	return true
}

// parkedKeepAlive is the TCP keep-alive of a parked connection: the
// kernel's probes find a peer whose host went away without closing (power
// loss, a cut cable), whose request is then withdrawn. The values are Go's
// defaults: the first probe after 15 s idle, then every 15 s, and the peer
// is declared gone after 9 unanswered probes (2.5 minutes in all).
var parkedKeepAlive = net.KeepAliveConfig{Enable: true}

// keepAlive turns on TCP keep-alive on a parked connection. Only a parked
// connection stays open for long, so Listen turns keep-alive off and the
// system calls are spent on the connections that need them.
func keepAlive(c net.Conn) {
	if tc, ok := serve.Socket(c).(*net.TCPConn); ok {
		tc.SetKeepAliveConfig(parkedKeepAlive)
	}
}

// readFailed tells a read error that is neither the peer's clean close nor our
// own: a reset, or a peer found gone.
func readFailed(err error) bool {
	return err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed)
}

// writeAnswer writes the answer a to c, a connection the server closes
// next, and ends our side of c with it (serve.WriteLast): the answer and
// our end reach the client together, so the client, which reads its
// answer and closes, closes second, and the connection's TIME_WAIT stays
// on the server's host. Under TLS the close_notify of a close follows the
// answer.
func writeAnswer(c net.Conn, a []byte) { serve.WriteLast(c, a, true) }

// writeGrant writes a grant's '+' to c and ends our side of c with it, as
// writeAnswer does, and reports whether the '+' was written. Under TLS no
// close_notify follows: a client that reads one byte would leave it
// unread, and its close would then look like a '+' never received.
func writeGrant(c net.Conn) bool { return serve.WriteLast(c, answerOKBytes, false) == nil }

// readRequest reads one whole request from c, after the bytes got that
// have already arrived. Errors: ErrMalformed for bytes the protocol does
// not allow (the caller answers '-'), any other for a read that could not
// complete (the caller drops the connection).
func readRequest(c net.Conn, got string) (Request, error) {
	var buf [maxRequestLen + 1]byte
	n := copy(buf[:], got)
	for first := true; ; first = false {
		var err error
		if !first || n == 0 {
			var m int
			m, err = c.Read(buf[n:])
			n += m
		}
		req, used, derr := DecodeRequest(buf[:n])
		switch {
		case derr == nil && used == n:
			return req, nil
		case derr == nil:
			return Request{}, ErrMalformed // bytes after the request
		case !errors.Is(derr, errIncomplete):
			return Request{}, derr
		case err != nil:
			return Request{}, err
		}
	}
}
