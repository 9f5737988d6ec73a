//go:build !unix

package serve

import "net"

// WriteNow writes nothing where a socket cannot be written without
// waiting: the caller's goroutine does it all.
func WriteNow(net.Conn, []byte) (int, error) { return 0, nil }
