//go:build !linux

package serve

import "net"

// writeMore writes b to c: without MSG_MORE, WriteLast's end follows on
// its own.
func writeMore(c net.Conn, b []byte) error {
	_, err := c.Write(b)
	return err
}

// cork does nothing without TCP_CORK.
func cork(net.Conn) {}
