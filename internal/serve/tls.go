package serve

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// UseTLS makes s speak TLS with cfg on every connection it accepts, and
// returns s; call it before Serve. The accept loop wraps each connection
// with tls.Server, which does no I/O: the handshake happens at the
// connection's first read or write, or at its Handshake, in the work the
// opener returns, never in the accept loop. The opener and everyone after
// it see the *tls.Conn; Socket reaches the socket under it.
//
// With queue above zero, writes to the connection never wait for the
// peer: what the socket does not take at once is kept, in order, and a
// goroutine of the server writes it; when the peer has not taken it within
// queue, the connection is closed. That is for a connection that other
// goroutines write to (a session's pushed grants), which a TLS connection
// otherwise blocks while the peer does not read. Writes then have no
// deadline of their own: SetWriteDeadline does nothing.
func (s *Server) UseTLS(cfg *tls.Config, queue time.Duration) *Server {
	s.tls, s.queue = cfg, queue
	return s
}

// wrap returns c as the server serves it: c itself without TLS.
func (s *Server) wrap(c net.Conn) net.Conn {
	if s.tls == nil {
		return c
	}
	if s.queue > 0 {
		c = newQueuedConn(c, &s.group, s.queue)
	}
	return tls.Server(c, s.tls)
}

// refusable returns c, a connection the gate refused, as Limit's refuse
// is given it: under TLS, where no handshake is made for it, one that
// writes nothing, since its client could not read a refusal in the clear.
func (s *Server) refusable(c net.Conn) net.Conn {
	if s.tls == nil {
		return c
	}
	return unwritable{c}
}

// unwritable is a connection that writes nothing.
type unwritable struct{ net.Conn }

func (unwritable) Write([]byte) (int, error) { return 0, errUnwritable }

// errUnwritable: a refusal in the clear to a client of a TLS port.
var errUnwritable = errors.New("serve: no refusal in the clear on a TLS port")

// Socket returns the connection under c's layers (a *tls.Conn, a queue of
// UseTLS): the one that has the socket. It returns c when c has none.
func Socket(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}

// CloseWrite ends c's write side, under its TLS layer if it has one
// (without TLS's close_notify, which a peer that reads only what it
// expects would leave unread), once what was written is on its way. It
// reports false when c cannot be half-closed; a half-close that fails (the
// peer has reset the connection) is not reported: the socket's state
// tells.
func CloseWrite(c net.Conn) bool {
	cw, ok := halfCloser(c)
	if ok {
		cw.CloseWrite()
	}
	return ok
}

// HalfCloses reports whether CloseWrite can end c's write side.
func HalfCloses(c net.Conn) bool {
	_, ok := halfCloser(c)
	return ok
}

// halfCloser returns what ends c's write side: c, or under TLS the
// connection beneath it.
func halfCloser(c net.Conn) (interface{ CloseWrite() error }, bool) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	cw, ok := c.(interface{ CloseWrite() error })
	return cw, ok
}

// errWriteClosed: a write after CloseWrite.
var errWriteClosed = errors.New("serve: write side closed")

// queuedConn is a connection whose writes never wait (see UseTLS).
type queuedConn struct {
	net.Conn
	g       *Group
	timeout time.Duration

	mu         sync.Mutex
	now        NowWriter
	buf        []byte // kept, for the drainer
	writing    bool   // the drainer runs
	closeWrite bool   // CloseWrite once buf is written
	err        error  // why writes fail from now on
}

// newQueuedConn returns c whose writes never wait; the rest of a write is
// written by a goroutine of g, each batch within timeout.
func newQueuedConn(c net.Conn, g *Group, timeout time.Duration) *queuedConn {
	q := &queuedConn{Conn: c, g: g, timeout: timeout}
	q.now.Init(c)
	return q
}

// Write writes what the socket takes now and keeps the rest. It fails
// only when an earlier write failed or the connection is closed.
func (q *queuedConn) Write(b []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.err != nil:
		return 0, q.err
	case q.closeWrite:
		return 0, errWriteClosed
	case q.writing:
		q.buf = append(q.buf, b...)
		return len(b), nil
	}
	n, err := q.now.Write(b)
	if err != nil {
		q.failLocked(err)
		return n, err
	}
	if n == len(b) {
		return n, nil
	}
	q.buf = append(q.buf[:0], b[n:]...)
	q.writing = true
	if !q.g.Go(q.drain) {
		q.failLocked(net.ErrClosed)
		return n, net.ErrClosed
	}
	return len(b), nil
}

// drain writes what Write kept until nothing is left, each batch within
// the timeout; a failure closes the connection.
func (q *queuedConn) drain() {
	var buf []byte
	for {
		q.mu.Lock()
		buf, q.buf = q.buf, buf[:0]
		if len(buf) == 0 || q.err != nil {
			q.writing = false
			if q.closeWrite && q.err == nil {
				q.closeWriteLocked()
			}
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		q.Conn.SetWriteDeadline(time.Now().Add(q.timeout))
		if _, err := q.Conn.Write(buf); err != nil {
			q.mu.Lock()
			q.failLocked(err)
			q.writing = false
			q.mu.Unlock()
			return
		}
	}
}

// failLocked makes every later write fail with err, and closes.
func (q *queuedConn) failLocked(err error) {
	if q.err == nil {
		q.err = err
	}
	q.Conn.Close()
}

// CloseWrite ends the write side once what was kept is written.
func (q *queuedConn) CloseWrite() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.err != nil:
		return q.err
	case q.writing:
		q.closeWrite = true
		return nil
	}
	return q.closeWriteLocked()
}

func (q *queuedConn) closeWriteLocked() error {
	q.err = errWriteClosed
	cw, ok := q.Conn.(interface{ CloseWrite() error })
	if !ok {
		return errors.ErrUnsupported
	}
	return cw.CloseWrite()
}

// Close closes the connection; what was kept is dropped.
func (q *queuedConn) Close() error {
	q.mu.Lock()
	if q.err == nil {
		q.err = net.ErrClosed
	}
	q.mu.Unlock()
	return q.Conn.Close()
}

// SetDeadline sets the read deadline only: writes have none.
func (q *queuedConn) SetDeadline(t time.Time) error { return q.Conn.SetReadDeadline(t) }

// SetWriteDeadline does nothing: writes never wait.
func (q *queuedConn) SetWriteDeadline(time.Time) error { return nil }

// NetConn returns the connection under the queue.
func (q *queuedConn) NetConn() net.Conn { return q.Conn }
