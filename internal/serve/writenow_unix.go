//go:build unix

package serve

import (
	"errors"
	"net"
	"syscall"
)

// WriteNow writes as much of b to c as its socket takes without waiting,
// and returns how much that was. A c that is not a socket (a *tls.Conn, a
// net.Pipe) is written to as it is, which may wait. Errors: the write's,
// other than a full socket.
func WriteNow(c net.Conn, b []byte) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c.Write(b)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	written := 0
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		for written < len(b) {
			n, err := syscall.Write(int(fd), b[written:])
			if n > 0 {
				written += n
			}
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case errors.Is(err, syscall.EAGAIN):
				return true // full: the rest goes to a goroutine
			case err != nil:
				werr = err
				return true
			case n == 0:
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return written, err
}
