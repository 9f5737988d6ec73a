//go:build !unix

package mutex

import "net"

// peerGone cannot peek on this platform; a departed peer is found when the
// answer fails or the watch read ends.
func peerGone(net.Conn) bool { return false }

// grantRefused cannot inspect the socket on this platform.
func grantRefused(net.Conn) bool { return false }
