//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// terminal is a no-op where there are no process groups.
type terminal struct{ fd int }

// ownGroup leaves cmd as it is: this platform has no process groups.
func ownGroup(cmd *exec.Cmd, streams ...any) *terminal { return &terminal{fd: -1} }

func (t *terminal) started(p *os.Process) {}
func (t *terminal) restore()              {}

// signalGroup passes sig to the command alone.
func signalGroup(p *os.Process, sig os.Signal) { p.Signal(sig) }

// killGroup has no group to kill.
func killGroup(p *os.Process) {}

// awaitEnd reaps the command and reports whether a signal ended it.
func (w *waiter) awaitEnd() bool { return w.reapedBySignal() }
