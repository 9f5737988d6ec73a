//go:build !unix

package serve

import "net"

// NowWriter writes nothing where a socket cannot be written without
// waiting: the caller's goroutine does it all.
type NowWriter struct{}

// Init does nothing.
func (w *NowWriter) Init(net.Conn) {}

// Write writes nothing and returns 0.
func (w *NowWriter) Write([]byte) (int, error) { return 0, nil }
