package mutex

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
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

// answers holds the three one-byte answers, shared and never written to.
var answers = map[byte][]byte{
	AnswerOK:     {AnswerOK},
	AnswerFailed: {AnswerFailed},
	AnswerBusy:   {AnswerBusy},
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
	group   serve.Group
	conns   serve.Conns

	mu        sync.Mutex
	listeners []net.Listener
	closed    bool
}

// NewServer returns a server for t. It serves nothing until Serve.
func NewServer(t *Table, cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	return &Server{table: t, timeout: cfg.HeaderTimeout, log: serve.Discard(cfg.Logger)}, nil
}

// Table returns the server's lock table.
func (s *Server) Table() *Table { return s.table }

// Serve accepts connections on ln until ctx ends or Close is called, then
// returns nil. It closes ln on return. Errors: ErrClosed after Close.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	s.listeners = append(s.listeners, ln)
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	return serve.Accept(ln, &s.group, s.log, s.handle)
}

// Close stops every listener, cuts every open connection (parked requests
// are withdrawn) and waits for the server's goroutines to end. It is safe
// to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	lns := s.listeners
	s.listeners = nil
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	s.group.Close()
	s.conns.CloseAll()
	s.group.Wait()
	return nil
}

// handle serves one connection: one request, one answer.
func (s *Server) handle(c net.Conn) {
	if !s.conns.Add(c) {
		c.Close()
		return
	}
	defer func() {
		s.conns.Remove(c)
		c.Close()
	}()
	c.SetReadDeadline(time.Now().Add(s.timeout))
	req, err := readRequest(c)
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			c.Write(answers[AnswerFailed])
		}
		return
	}
	switch req.Action {
	case ActionLock:
		s.lock(c, s.claim(c, req))
	case ActionTryLock:
		g, p, err := s.table.TryLock(s.claim(c, req))
		if err != nil {
			c.Write(answers[answerFor(err)])
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
	c.Write(answers[AnswerOK])
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
	// No timeout while parked. The header deadline goes before Enqueue, so
	// that it cannot undo a wake.
	c.SetReadDeadline(time.Time{})
	tk := s.table.Enqueue(cl, func() { c.SetReadDeadline(aLongTimeAgo) })
	if tk.Done() == nil {
		s.deliver(c, tk.grant, tk.pending)
		return
	}
	var b [1]byte
	for {
		_, rerr := c.Read(b[:])
		g, p, err := s.table.Result(tk)
		if errors.Is(err, errIncomplete) {
			if errors.Is(rerr, os.ErrDeadlineExceeded) {
				continue // a wake that lost the race with a later grant
			}
			// The peer left, failed, or sent bytes it must not send.
			s.table.Withdraw(tk)
			if rerr == nil {
				c.Write(answers[AnswerFailed])
			}
			s.log.Debug("parked request withdrawn", slog.String(logRemote, cl.RemoteAddr), slog.Any(logError, rerr))
			return
		}
		if err != nil {
			c.Write(answers[AnswerFailed]) // withdrawn by a reset of its source
			return
		}
		if !errors.Is(rerr, os.ErrDeadlineExceeded) || peerGone(c) {
			s.table.ReleaseGrant(g) // granted to a peer that has left
			s.log.Debug("grant to departed peer passed on", slog.String(logRemote, cl.RemoteAddr))
			return
		}
		s.deliver(c, g, p)
		return
	}
}

// deliver answers a grant: '+' once it is durable, then it waits for the
// peer to close. A grant that cannot be made durable is answered '-'; one
// whose '+' the peer never read (the write fails, or the peer resets the
// connection) is undone, so the key passes on.
func (s *Server) deliver(c net.Conn, g Grant, p Pending) {
	if err := waitPending(p); err != nil {
		s.table.ReleaseGrant(g)
		c.Write(answers[AnswerFailed])
		s.log.Warn("grant not durable, released", slog.Any(logError, err))
		return
	}
	if _, err := c.Write(answers[AnswerOK]); err != nil {
		s.table.ReleaseGrant(g)
		return
	}
	// A client reads its '+' and closes: end of stream. One that closed
	// before the '+' arrived, or with the '+' unread, never got it.
	c.SetReadDeadline(time.Now().Add(s.timeout))
	var b [1]byte
	_, err := c.Read(b[:])
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) && grantRefused(c) {
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
