//go:build !unix

package oneshot

import "net"

// resetPending cannot read the socket error on this platform.
func resetPending(net.Conn) bool { return false }
