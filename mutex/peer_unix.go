//go:build unix && !linux

package mutex

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// resetPending reports a pending socket error: the peer reset the
// connection after our last write.
func resetPending(c net.Conn) bool {
	rc, ok := rawConn(c)
	if !ok {
		return false
	}
	pending := false
	rc.Control(func(fd uintptr) {
		soErr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		pending = err == nil && soErr != 0
	})
	return pending
}

// rawConn returns the descriptor access of a TCP connection.
func rawConn(c net.Conn) (syscall.RawConn, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}
