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

// readNow reads into b what has already arrived on c, without waiting: 0
// and no error when nothing has. Errors: io.EOF when the peer has closed,
// or the read's error.
func readNow(c net.Conn, b []byte) (int, error) {
	rc, ok := rawConn(c)
	if !ok {
		return 0, nil
	}
	var n int
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		n, rerr = syscall.Read(int(fd), b)
		return true
	})
	switch {
	case err != nil:
		return 0, err
	case rerr == syscall.EAGAIN || rerr == syscall.EINTR:
		return 0, nil
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(b) > 0:
		return 0, io.EOF
	}
	return n, nil
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
