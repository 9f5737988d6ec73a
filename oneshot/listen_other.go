//go:build !linux

package oneshot

import "syscall"

// listenControl leaves the listening socket as it is.
func listenControl(network, address string, rc syscall.RawConn) error { return nil }
