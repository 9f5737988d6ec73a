//go:build !unix

package session

import "net"

// nowWriter writes nothing where a socket cannot be written without
// waiting: the caller's goroutine does it all.
type nowWriter struct{}

func (w *nowWriter) init(net.Conn) {}

func (w *nowWriter) write([]byte) (int, error) { return 0, nil }
