//go:build !unix

package mutex

import "net"

// grantRefused cannot inspect the socket on this platform.
func grantRefused(net.Conn) bool { return false }
