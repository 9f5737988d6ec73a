// Package serve holds what every listener of lcd shares: an accept loop
// that backs off on transient errors, a group that owns the goroutines it
// starts, and a set of open connections to cut at shutdown.
package serve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Backoff bounds for Accept's retries after a failed accept.
const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = time.Second
)

// Group owns goroutines: Go starts one and tracks it, Close refuses new
// ones, Wait waits for those started. The zero value is ready to use.
type Group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f in a new goroutine unless the group is closed, and reports
// whether it did.
func (g *Group) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// Close makes Go refuse from now on. It is safe to call more than once.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// Wait blocks until every goroutine started by Go has returned.
func (g *Group) Wait() { g.wg.Wait() }

// Conns is the set of open connections of one server. The zero value is
// ready to use.
type Conns struct {
	mu     sync.Mutex
	closed bool
	m      map[net.Conn]struct{}
}

// Add tracks c and reports true, or reports false once CloseAll has run.
func (s *Conns) Add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = make(map[net.Conn]struct{})
	}
	s.m[c] = struct{}{}
	return true
}

// Remove stops tracking c and reports whether it was tracked.
func (s *Conns) Remove(c net.Conn) bool {
	s.mu.Lock()
	_, ok := s.m[c]
	delete(s.m, c)
	s.mu.Unlock()
	return ok
}

// Len returns the number of tracked connections.
func (s *Conns) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// CloseAll closes every tracked connection and refuses new ones. It is safe
// to call more than once.
func (s *Conns) CloseAll() {
	s.mu.Lock()
	s.closed = true
	conns := s.m
	s.m = nil
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// workerIdle is how often idle workers are told to end.
const workerIdle = time.Second

// An Opener starts the service of a connection. Accept calls it in its own
// goroutine, one connection after another in the order they were
// accepted, so it must not block; it does there what must follow that
// order, and returns the rest of the work, which runs in a worker
// goroutine. It returns nil when nothing is left to do.
type Opener func(net.Conn) func()

// A ServerOpener is how a Server starts a connection, in the accept loop
// as an Opener does. It may finish the connection's service there and
// return no work; otherwise its work runs in a worker. Either reports
// whether the connection stays open (keep): its owner then ends it with
// Server.Finish; otherwise the Server closes it.
type ServerOpener func(net.Conn) (work func() (keep bool), keep bool)

// Worker returns the ServerOpener that does all of handle's work in a
// worker; the connection is closed when handle returns.
func Worker(handle func(net.Conn)) ServerOpener {
	return func(c net.Conn) (func() bool, bool) {
		return func() bool {
			handle(c)
			return false
		}, false
	}
}

// Accept accepts connections on ln until ln is closed, calls open for each
// in accept order, and runs the work open returns. The work goes to an
// idle worker when one waits, and otherwise to a new worker started in g;
// a connection that g refuses is closed. A worker serves one piece of work
// after another. Once a second, every worker idle at that moment is told
// to end, so an idle pool is gone within a second or so; under load a few
// workers end and are started again. Reusing workers keeps the stacks
// they have grown, which a fresh goroutine would grow again on every
// connection, and no timer is touched per connection.
//
// After a failed accept other than a closed listener it waits, doubling
// from 5 ms to 1 s, and tries again. It returns nil once ln is closed.
func Accept(ln net.Listener, g *Group, log *slog.Logger, open Opener) error {
	log = Discard(log)
	work := make(chan func())
	quit := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	var idle atomic.Int64
	worker := func(f func()) {
		for {
			f()
			idle.Add(1)
			select {
			case f = <-work:
				idle.Add(-1)
			case <-quit:
				idle.Add(-1)
				return
			case <-done:
				return
			}
		}
	}
	g.Go(func() {
		tick := time.NewTicker(workerIdle)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-done:
				return
			}
			for n := idle.Load(); n > 0; n-- {
				select {
				case quit <- struct{}{}:
				default:
					n = 0
				}
			}
		}
	})
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			delay = min(max(2*delay, minBackoff), maxBackoff)
			log.Warn("accept failed, retrying", slog.String("listener", ln.Addr().String()),
				slog.Any("error", err), slog.Duration("backoff", delay))
			time.Sleep(delay)
			continue
		}
		delay = 0
		f := open(c)
		if f == nil {
			continue
		}
		select {
		case work <- f:
		default:
			if !g.Go(func() { worker(f) }) {
				c.Close()
			}
		}
	}
}

// ErrClosed is returned by Server.Serve after Close.
var ErrClosed = errors.New("serve: closed")

// Server is the life cycle every port of lcd shares: it serves any number
// of listeners with one ServerOpener, tracks each open connection, and on Close
// stops the listeners, cuts the connections and waits for its goroutines.
type Server struct {
	open  ServerOpener
	log   *slog.Logger
	group Group
	conns Conns

	mu        sync.Mutex
	listeners []net.Listener
	closed    bool

	gate     *Gate // nil: no cap
	operator bool
	refuse   func(net.Conn)
}

// NewServer returns a server that opens each connection with open; the
// server closes the connection once the work open returned has run,
// unless the work keeps it. A nil log discards.
func NewServer(open ServerOpener, log *slog.Logger) *Server {
	return &Server{open: open, log: Discard(log)}
}

// Finish closes c, a connection the work kept open, and stops tracking it.
func (s *Server) Finish(c net.Conn) {
	if s.conns.Remove(c) {
		s.gate.Release(s.operator)
	}
	c.Close()
}

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
	return Accept(ln, &s.group, s.log, s.openConn)
}

// openConn tracks c, opens it, and returns the work left, which closes c
// unless it keeps it open.
func (s *Server) openConn(c net.Conn) func() {
	if !s.gate.Take(s.operator) {
		if s.refuse != nil {
			s.refuse(c)
		}
		c.Close()
		return nil
	}
	if !s.conns.Add(c) {
		s.gate.Release(s.operator)
		c.Close()
		return nil
	}
	f, keep := s.open(c)
	if f == nil {
		if !keep {
			s.Finish(c)
		}
		return nil
	}
	return func() {
		keep := false
		defer func() {
			if !keep {
				s.Finish(c)
			}
		}()
		keep = f()
	}
}

// Close stops every listener, cuts every open connection and waits for the
// server's goroutines to end. It is safe to call more than once.
func (s *Server) Close() {
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
}

// Discard returns l, or a logger that drops everything when l is nil.
func Discard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
