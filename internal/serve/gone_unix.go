//go:build unix

package serve

import (
	"net"
	"syscall"
)

// PeerGone reports whether the peer of c has ended its side of the
// connection (an end of stream or a reset is the next thing a read
// would return), without waiting and without taking any byte: one
// system call, a peek that never waits. It never waits for a read of c
// under way in another goroutine either, so it may be asked while one
// is. A connection closed here counts as gone; one without a socket (a
// net.Pipe) never is. Under TLS the socket beneath is asked: a close or
// a reset is seen, a close_notify ahead of them hides them (its bytes
// are what a read would return next).
func PeerGone(c net.Conn) bool {
	sc, ok := Socket(c).(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	var b [1]byte
	if err := rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = (n == 0 && err == nil) || (err != nil && err != syscall.EAGAIN && err != syscall.EINTR)
	}); err != nil {
		return true
	}
	return gone
}
