//go:build unix && !linux

package main

// awaitEnd reaps the command and reports whether a signal ended it. This
// platform offers no wait that leaves the command unreaped.
func (w *waiter) awaitEnd() bool {
	return w.reapedBySignal()
}
