package mutex

import (
	"net"
	"syscall"
)

// rawConn returns the descriptor access of a TCP connection.
func rawConn(c net.Conn) (syscall.RawConn, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}
