//go:build unix

package mutex

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerGone reports whether the peer of c has closed or reset its side,
// without consuming any byte: a non-blocking peek that finds end of stream
// or an error.
func peerGone(c net.Conn) bool {
	rc, ok := rawConn(c)
	if !ok {
		return false
	}
	gone := false
	var b [1]byte
	rc.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		gone = n == 0 && err == nil || err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR)
		return true
	})
	return gone
}

func rawConn(c net.Conn) (syscall.RawConn, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}
