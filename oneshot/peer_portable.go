//go:build !linux

package oneshot

import (
	"errors"
	"io"
	"net"
)

// peerAnswer reads, without waiting, how the peer answered a grant's '+'
// after our side of c was ended: settled once the peer has closed, and
// then received if the '+' reached the client's program. Without Linux's
// TCP_INFO it can only see a reset: the client closed with the '+' unread,
// or had closed before it arrived. Where a socket cannot be read without
// waiting, every grant is settled and received at once.
func peerAnswer(c net.Conn) (settled, received bool) {
	r, err := readNow(c, 1)
	n := len(r.got())
	r.free()
	switch {
	case errors.Is(err, io.EOF):
		return true, !resetPending(c)
	case err != nil:
		return true, false
	case n > 0:
		return true, true // bytes the protocol does not allow: not our concern
	}
	return !readsNow, true
}

// acknowledged cannot tell on this platform: the '+' counts as received.
func acknowledged(net.Conn) bool { return true }
