package mutex

import (
	"net"

	"golang.org/x/sys/unix"
)

// TCP states from include/net/tcp_states.h.
const (
	tcpEstablished = 1
	tcpCloseWait   = 8
)

// received waits for the peer to close after its '+' and reports whether
// the '+' reached the client's program; the caller has set a read
// deadline. A client that reads its '+' and closes sends a FIN that
// acknowledges the byte. One that had closed before the '+' arrived sent a
// FIN that does not cover it (and answers the late byte with a reset); one
// that closes with the byte unread resets the connection. So: a FIN with
// the '+' acknowledged means received; a reset, or a FIN with the '+'
// unacknowledged, means not.
//
// It reads the socket's TCP state after each readiness event rather than
// reading bytes: no system call but one getsockopt per event. A peer that
// keeps the connection open past the deadline, or sends bytes instead of
// closing, is taken to have received the '+'.
func received(c net.Conn) bool {
	rc, ok := rawConn(c)
	if !ok {
		return true
	}
	got := true
	err := rc.Read(func(fd uintptr) bool {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		switch {
		case err != nil:
			return true // cannot tell: keep the grant
		case info.State == tcpEstablished:
			return false // wait for the peer's next move
		case info.State == tcpCloseWait:
			got = info.Unacked == 0
		default:
			got = false // reset
		}
		return true
	})
	if err != nil {
		return true // deadline: the client holds the connection open
	}
	return got
}
