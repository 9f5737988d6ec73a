//go:build unix

package session

import (
	"errors"
	"net"
	"syscall"
)

// nowWriter writes to a connection's socket without waiting. It is made
// once per connection, so that a write allocates nothing; it is used
// under its conn's wmu.
type nowWriter struct {
	c       net.Conn
	rc      syscall.RawConn // nil: c has no descriptor, or it could not be had
	rcErr   error
	fn      func(fd uintptr) bool // w.writeFD, bound once
	b       []byte                // being written
	written int
	err     error
}

func (w *nowWriter) init(c net.Conn) {
	w.c = c
	if sc, ok := c.(syscall.Conn); ok {
		w.rc, w.rcErr = sc.SyscallConn()
		w.fn = w.writeFD
	}
}

// write writes as much of b as the socket takes without waiting, and
// returns how much that was. A connection without a descriptor is written
// with Write, which may wait. Errors: the write's, other than a full
// socket.
func (w *nowWriter) write(b []byte) (int, error) {
	if w.rcErr != nil {
		return 0, w.rcErr
	}
	if w.rc == nil {
		return w.c.Write(b)
	}
	w.b, w.written, w.err = b, 0, nil
	err := w.rc.Write(w.fn)
	n := w.written
	if err == nil {
		err = w.err
	}
	w.b, w.err = nil, nil
	return n, err
}

// writeFD is the body of the descriptor's write: it returns true at once,
// whatever happened, so that the poller never waits.
func (w *nowWriter) writeFD(fd uintptr) bool {
	for w.written < len(w.b) {
		n, err := syscall.Write(int(fd), w.b[w.written:])
		if n > 0 {
			w.written += n
		}
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return true // full: the rest goes to a goroutine
		case err != nil:
			w.err = err
			return true
		case n == 0:
			return true
		}
	}
	return true
}
