//go:build unix

package oneshot

import (
	"io"
	"net"
	"syscall"

	"github.com/locking-center/locking-center/internal/serve"
)

// readsNow tells that readNow can read a socket without waiting here.
const readsNow = true

// readNow reads what has already arrived on c, at most max bytes (and at
// most maxRequestLen+1), without waiting, into a buffer of the pool:
// r.got() is what it read, nothing when nothing has arrived. The caller
// gives r back (r.free) once it no longer uses those bytes. Errors: io.EOF
// when the peer has closed, or the read's error.
func readNow(c net.Conn, max int) (r *nowRead, err error) {
	r = nowReads.Get().(*nowRead)
	rc, ok := rawConn(c)
	if !ok {
		return r, nil
	}
	if r.fn == nil {
		r.fn = r.read
	}
	r.b = r.buf[:min(max, len(r.buf))]
	if err := rc.Read(r.fn); err != nil {
		return r, err
	}
	switch {
	case r.err == syscall.EAGAIN || r.err == syscall.EINTR:
		return r, nil
	case r.err != nil:
		return r, r.err
	case r.n == 0 && len(r.b) > 0:
		return r, io.EOF
	}
	return r, nil
}

// read is the descriptor's read of readNow: it never waits.
func (r *nowRead) read(fd uintptr) bool {
	r.n, r.err = syscall.Read(int(fd), r.b)
	if r.n < 0 {
		r.n = 0
	}
	return true
}

// rawConn returns the descriptor access of a socket connection, under its
// TLS if it has any.
func rawConn(c net.Conn) (syscall.RawConn, bool) {
	sc, ok := serve.Socket(c).(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}

// control runs f on c's descriptor, unless c is closed or not a socket.
func control(c net.Conn, f func(fd int)) {
	if rc, ok := rawConn(c); ok {
		rc.Control(func(fd uintptr) { f(int(fd)) })
	}
}
