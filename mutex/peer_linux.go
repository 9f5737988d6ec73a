package mutex

import (
	"net"

	"golang.org/x/sys/unix"
)

// grantRefused reports, once the peer has ended its stream after our '+',
// whether the '+' never reached the peer's program. A client that reads its
// '+' and closes acknowledges the byte with its FIN. One that closed before
// the '+' arrived sends a FIN that does not cover it, and answers the late
// byte with a reset; one that closed with the byte unread resets at once.
// So: a reset, a closed socket, or a byte still unacknowledged.
func grantRefused(c net.Conn) bool {
	rc, ok := rawConn(c)
	if !ok {
		return false
	}
	refused := false
	rc.Control(func(fd uintptr) {
		if soErr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soErr != 0 {
			refused = true
			return
		}
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return
		}
		const tcpClose = 7 // TCP_CLOSE in include/net/tcp_states.h
		refused = info.State == tcpClose || info.Unacked > 0
	})
	return refused
}
