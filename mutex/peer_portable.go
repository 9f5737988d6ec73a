//go:build !linux

package mutex

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// received waits for the peer to close after its '+' and reports whether
// the '+' reached the client's program; the caller has set a read
// deadline. Without Linux's TCP_INFO it can only see a reset: the client
// closed with the '+' unread, or had closed before it arrived and answered
// it with a reset before our read.
func received(c net.Conn) bool {
	var b [1]byte
	_, err := c.Read(b[:])
	return !errors.Is(err, syscall.ECONNRESET) && !(errors.Is(err, io.EOF) && resetPending(c))
}
