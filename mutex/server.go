package mutex

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/locking-center/locking-center/internal/serve"
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

// answerBytes returns the one-byte answer a as a shared slice.
func answerBytes(a byte) []byte {
	switch a {
	case AnswerOK:
		return answerOKBytes
	case AnswerBusy:
		return answerBusyBytes
	}
	return answerFailedBytes
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// HeaderTimeout bounds the time for a request's bytes to arrive, and
	// the time a granted client has to close after its '+'. Zero means
	// DefaultHeaderTimeout (10 s). It never applies to a parked request.
	HeaderTimeout time.Duration
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
}

// Validate reports a configuration that cannot work.
func (c ServerConfig) Validate() error {
	if c.HeaderTimeout < 0 {
		return errors.New("mutex: header timeout must not be negative")
	}
	return nil
}

// Server answers the mutex port from a Table.
type Server struct {
	table   *Table
	timeout time.Duration
	log     *slog.Logger
	srv     *serve.Server
}

// NewServer returns a server for t. It serves nothing until Serve.
func NewServer(t *Table, cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	s := &Server{table: t, timeout: cfg.HeaderTimeout, log: serve.Discard(cfg.Logger)}
	s.srv = serve.NewServer(s.handle, s.log)
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
	return nil
}

// handle serves one connection: one request, one answer. The caller
// closes c.
func (s *Server) handle(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(s.timeout))
	req, err := readRequest(c)
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			c.Write(answerFailedBytes)
		}
		return
	}
	switch req.Action {
	case ActionLock:
		s.lock(c, s.claim(c, req))
	case ActionTryLock:
		g, p, err := s.table.TryLock(s.claim(c, req))
		if err != nil {
			c.Write(answerBytes(answerFor(err)))
			return
		}
		s.deliver(c, g, p)
	case ActionUnlock, ActionResetKey:
		p := s.table.Release(req.Key)
		s.answerRelease(c, p)
	case ActionResetSource:
		_, _, p := s.table.ResetSource(req.Source)
		s.answerRelease(c, p)
	}
}

// answerRelease answers '+' once the release is durable. A release whose
// write failed has still taken effect in memory; the journal counts it.
func (s *Server) answerRelease(c net.Conn, p Pending) {
	if err := waitPending(p); err != nil {
		s.log.Warn("release not durable", slog.Any(logError, err))
	}
	c.Write(answerOKBytes)
}

// claim builds the claim of req on c: the source defaults to the peer IP.
func (s *Server) claim(c net.Conn, req Request) Claim {
	remote := c.RemoteAddr().String()
	source := req.Source
	if source == "" {
		source = remote
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			source = a.IP.String()
		}
	}
	return Claim{Key: req.Key, Source: source, RemoteAddr: remote}
}

// lock serves a blocking lock: grant at once, or park and watch c.
func (s *Server) lock(c net.Conn, cl Claim) {
	tk := s.table.Enqueue(cl, func() { c.SetReadDeadline(aLongTimeAgo) })
	if tk.Done() == nil {
		s.deliver(c, tk.grant, tk.pending)
		return
	}
	// No timeout while parked. Clearing the header deadline could undo a
	// wake that came first, so the state is checked before every read.
	c.SetReadDeadline(time.Time{})
	var b [1]byte
	for {
		g, p, err := s.table.Result(tk)
		if errors.Is(err, ErrParked) {
			_, rerr := c.Read(b[:])
			if errors.Is(rerr, os.ErrDeadlineExceeded) {
				continue // woken: the state has changed
			}
			// The peer left, failed, or sent bytes it must not send; a
			// grant that raced the read is passed on.
			if granted, _ := s.table.Withdraw(tk); !granted && rerr == nil {
				c.Write(answerFailedBytes)
			}
			s.log.Debug("parked request withdrawn", slog.String(logRemote, cl.RemoteAddr), slog.Any(logError, rerr))
			return
		}
		if err != nil {
			c.Write(answerFailedBytes) // withdrawn by a reset of its source
			return
		}
		s.deliver(c, g, p)
		return
	}
}

// deliver answers a grant with '+' once it is durable. A grant that cannot
// be made durable is answered '-' and undone; so is one whose '+' cannot be
// written.
//
// It then waits for the peer to close, to learn whether the '+' reached the
// client's program. A client that gave up in the same instant (its
// deadline fired, its context was cancelled) closes with the '+' unread or
// before it arrived; the grant is undone and the key passes on, instead of
// staying with a client that believes it failed.
func (s *Server) deliver(c net.Conn, g Grant, p Pending) {
	if err := waitPending(p); err != nil {
		s.table.ReleaseGrant(g)
		c.Write(answerFailedBytes)
		s.log.Warn("grant not durable, released", slog.Any(logError, err))
		return
	}
	if _, err := c.Write(answerOKBytes); err != nil {
		s.table.ReleaseGrant(g)
		return
	}
	c.SetReadDeadline(time.Now().Add(s.timeout))
	if !received(c) {
		s.table.ReleaseGrant(g)
		s.log.Debug("grant not received, passed on", slog.String(logRemote, g.RemoteAddr))
	}
}

// readRequest reads one whole request from c. Errors: ErrMalformed for
// bytes the protocol does not allow (the caller answers '-'), any other for
// a read that could not complete (the caller drops the connection).
func readRequest(c net.Conn) (Request, error) {
	var buf [maxRequestLen + 1]byte
	n := 0
	for {
		m, err := c.Read(buf[n:])
		n += m
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
