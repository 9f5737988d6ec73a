//go:build !unix

package mutex

import "net"

// peerGone cannot peek on this platform; a departed peer is found when the
// answer fails or the watch read ends.
func peerGone(net.Conn) bool { return false }

// resetSeen cannot read the socket error on this platform.
func resetSeen(net.Conn) bool { return false }
