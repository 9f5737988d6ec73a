//go:build unix && !linux

package mutex

import (
	"net"

	"golang.org/x/sys/unix"
)

// grantRefused reports whether the socket holds a pending error after our
// '+': the peer reset the connection instead of reading it.
func grantRefused(c net.Conn) bool {
	rc, ok := rawConn(c)
	if !ok {
		return false
	}
	refused := false
	rc.Control(func(fd uintptr) {
		soErr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		refused = err == nil && soErr != 0
	})
	return refused
}
