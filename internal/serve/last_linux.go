package serve

import (
	"errors"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// moreWrite is a write of writeMore: pooled, and with the function the
// descriptor's write calls bound to it once, so that the write allocates
// nothing but the descriptor's access.
type moreWrite struct {
	b   []byte // what is left to write
	err error
	fn  func(fd uintptr) bool // w.write, bound at its first use
}

var moreWrites = sync.Pool{New: func() any { return new(moreWrite) }}

// writeMore writes b to c, a TCP connection's held back (MSG_MORE) for
// what is sent next (WriteLast's FIN). Anything but a TCP connection is
// written with its Write.
func writeMore(c net.Conn, b []byte) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		_, err := c.Write(b)
		return err
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	w := moreWrites.Get().(*moreWrite)
	if w.fn == nil {
		w.fn = w.write
	}
	w.b = b
	if err = rc.Write(w.fn); err == nil {
		err = w.err
	}
	w.b, w.err = nil, nil
	moreWrites.Put(w)
	return err
}

// write is the descriptor's write of writeMore; it waits (returns false)
// only while the socket takes nothing.
func (w *moreWrite) write(fd uintptr) bool {
	for len(w.b) > 0 {
		n, err := unix.SendmsgN(int(fd), w.b, nil, nil, unix.MSG_MORE)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return false
		case err != nil:
			w.err = err
			return true
		}
		w.b = w.b[n:]
	}
	return true
}

// cork makes the TCP socket of c hold what is written to it until its
// write side ends, or for about 200 ms (TCP_CORK).
func cork(c net.Conn) {
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 1) })
		}
	}
}
