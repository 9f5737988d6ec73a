//go:build !unix

package mutex

import "net"

// resetPending cannot read the socket error on this platform.
func resetPending(net.Conn) bool { return false }
