//go:build unix && !linux

package oneshot

import (
	"net"

	"golang.org/x/sys/unix"
)

// resetPending reports a pending socket error: the peer reset the
// connection after our last write.
func resetPending(c net.Conn) bool {
	pending := false
	control(c, func(fd int) {
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		pending = err == nil && soErr != 0
	})
	return pending
}
