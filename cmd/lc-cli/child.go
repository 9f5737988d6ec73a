package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// outputDrain bounds how long lc-cli keeps copying output that is not a
// file (only when it is driven in process) after the command has ended,
// from processes the command left running.
const outputDrain = 5 * time.Second

// runCommand runs opts.Command with opts's streams and environment, in a
// process group of its own, and passes every signal from opts.Signals on
// to that group until the command ends. When lost is closed (the lock the
// command runs under is gone), the group gets SIGTERM, and SIGKILL
// killGrace later if the command has not ended. It returns the command's
// exit code (128+N when signal N ended it), or exitCannotRun and the reason
// when it could not start.
func runCommand(opts *lockOptions, lost <-chan struct{}) (exitCode, error) {
	argv := opts.Command
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = opts.Stdin, opts.Stdout, opts.Stderr
	cmd.Env = opts.Environ
	cmd.WaitDelay = outputDrain
	tty := ownGroup(cmd, opts.Stdin, opts.Stdout, opts.Stderr)
	defer tty.restore()
	if err := cmd.Start(); err != nil {
		return exitCannotRun, fmt.Errorf("cannot run %q: %w", argv[0], err)
	}
	tty.started(cmd.Process)

	w := &waiter{cmd: cmd, tty: tty}
	ended := make(chan bool, 1) // whether the command died of a signal
	go func() { ended <- w.awaitEnd() }()
	forwarded := false
	var kill <-chan time.Time
	for {
		select {
		case sig := <-opts.Signals:
			forwarded = true
			signalGroup(cmd.Process, sig)
		case <-lost:
			lost, forwarded = nil, true
			signalGroup(cmd.Process, syscall.SIGTERM)
			t := time.NewTimer(killGrace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			killGroup(cmd.Process)
		case signaled := <-ended:
			if signaled || forwarded {
				// Nothing the command started may outlive the key.
				killGroup(cmd.Process)
			}
			tty.restore()
			return w.status()
		}
	}
}

// waiter waits for a started command: awaitEnd learns that it has ended
// (without reaping it where the platform allows, so its process group
// cannot be taken over), status reaps it.
type waiter struct {
	cmd    *exec.Cmd
	tty    *terminal // the terminal handed to the command, for job control
	reaped bool
	err    error
}

// reap waits for the command and its output copying, once.
func (w *waiter) reap() error {
	if !w.reaped {
		w.err = w.cmd.Wait()
		w.reaped = true
	}
	return w.err
}

// reapedBySignal reaps the command and reports whether a signal ended it:
// awaitEnd where the platform cannot wait without reaping.
func (w *waiter) reapedBySignal() bool {
	w.reap()
	if w.cmd.ProcessState == nil {
		return false
	}
	_, ok := deathSignal(w.cmd.ProcessState)
	return ok
}

// status reaps the command and returns its exit code.
func (w *waiter) status() (exitCode, error) {
	err := w.reap()
	ps := w.cmd.ProcessState
	if ps == nil {
		return exitFailure, fmt.Errorf("wait for %q: %w", w.cmd.Path, err)
	}
	if sig, ok := deathSignal(ps); ok {
		return signalCode(sig), nil
	}
	return exitCode(ps.ExitCode()), nil
}

// deathSignal returns the signal that ended a reaped command, if one did.
func deathSignal(ps *os.ProcessState) (syscall.Signal, bool) {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}
