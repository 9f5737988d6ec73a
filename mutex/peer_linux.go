package mutex

import (
	"net"

	"golang.org/x/sys/unix"
)

// TCP states from include/net/tcp_states.h.
const (
	tcpTimeWait = 6
	tcpClose    = 7
)

// received ends our side of a connection whose grant's '+' was just
// written, waits for the peer to end its side, and reports whether the '+'
// reached the client's program; the caller has set a read deadline.
//
// Our FIN goes out right after the '+', as it would if we simply closed.
// A client that reads its '+' and closes answers with a FIN that
// acknowledges everything, and the connection ends cleanly. A client that
// closes with the '+' unread, or had closed before it arrived, answers the
// byte with a reset, which leaves an error on the socket; a '+' the peer
// never acknowledged means the same. A peer that keeps the connection open
// past the deadline, or that the state cannot be read for, is taken to
// have received the '+'.
//
// It reads the TCP state after each readiness event rather than reading
// bytes.
func received(c net.Conn) bool {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return true
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return true
	}
	// It fails when a reset has already closed the connection; the state
	// below says so.
	tc.CloseWrite()
	got := true
	err = rc.Read(func(fd uintptr) bool {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return true
		}
		if info.State != tcpClose && info.State != tcpTimeWait {
			return false // the peer has not ended its side yet
		}
		soErr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		got = err == nil && soErr == 0 && info.Unacked == 0
		return true
	})
	return err != nil || got
}
