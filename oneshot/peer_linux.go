package oneshot

import (
	"net"

	"golang.org/x/sys/unix"
)

// TCP states from include/net/tcp_states.h.
const (
	tcpTimeWait = 6
	tcpClose    = 7
)

// peerAnswer reads, without waiting, how the peer answered a grant's '+'
// after our side of c was ended: settled once the peer has ended its side
// too, and then received if the '+' reached the client's program.
//
// A client that reads its '+' and closes answers with a FIN that
// acknowledges everything, and the connection ends cleanly (TIME_WAIT or
// CLOSE, no error, nothing unacknowledged). A client that closes with the
// '+' unread, or had closed before it arrived, answers the byte with a
// reset, which leaves an error on the socket. A state that cannot be read
// (the connection was cut at shutdown) counts as received.
func peerAnswer(c net.Conn) (settled, received bool) {
	settled, received = true, true
	control(c, func(fd int) {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return
		}
		if info.State != tcpClose && info.State != tcpTimeWait {
			settled = false // the peer has not ended its side yet
			return
		}
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		received = err == nil && soErr == 0 && info.Unacked == 0
	})
	return settled, received
}

// acknowledged reports whether the peer's kernel acknowledged the '+' on
// c, for a peer that kept the connection open past the header timeout:
// one that did is taken to have received its grant; one that did not is a
// host that went away while parked. What may still be unacknowledged is
// the '+' and our FIN, or the FIN alone.
func acknowledged(c net.Conn) bool {
	acked := true
	control(c, func(fd int) {
		if queued, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ); err == nil && queued > 1 {
			acked = false
		}
	})
	return acked
}
