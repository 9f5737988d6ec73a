//go:build !linux

package session

// poller parks connections on Linux only; elsewhere none is made, and a
// connection keeps its goroutine while it is idle.
type poller struct{}

func newPoller(*Server) (*poller, error) { return nil, nil }

func (*poller) close()                 {}
func (*poller) add(*conn) bool         { return false }
func (*poller) closeParked(*conn) bool { return false }
