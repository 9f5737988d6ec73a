//go:build !unix

package serve

import "net"

// PeerGone cannot read a socket without waiting on this platform: no
// peer is ever found gone.
func PeerGone(net.Conn) bool { return false }
