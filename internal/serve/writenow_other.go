//go:build !unix

package serve

import (
	"net"
	"syscall"
)

// NowWriter writes nothing where a socket cannot be written without
// waiting: the caller's goroutine does it all.
type NowWriter struct{}

// Init does nothing.
func (w *NowWriter) Init(net.Conn) {}

// Raw returns nil: there is no descriptor to use.
func (w *NowWriter) Raw() syscall.RawConn { return nil }

// Write writes nothing and returns 0.
func (w *NowWriter) Write([]byte) (int, error) { return 0, nil }

// WritePush writes nothing and returns 0.
func (w *NowWriter) WritePush([]byte) (int, error) { return 0, nil }
