package main

import "golang.org/x/sys/unix"

// si_code values of a child's state change (waitid).
const (
	cldKilled  = 2 // killed by a signal
	cldDumped  = 3 // killed by a signal, dumped core
	cldStopped = 5 // stopped by a signal
)

// awaitEnd blocks until the command has ended and reports whether a signal
// ended it. The command is not reaped: its process group keeps its id
// until status reaps it, so killGroup cannot hit a stranger's group.
// While lc-cli has a terminal it also watches the command stop, for job
// control (see terminal.childStopped).
func (w *waiter) awaitEnd() bool {
	pid := w.cmd.Process.Pid
	opts := unix.WEXITED | unix.WNOWAIT
	if w.tty.fd >= 0 {
		opts |= unix.WSTOPPED
	}
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, opts, nil)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return w.reapedBySignal()
		case info.Code == cldStopped:
			// Take the stop report, so the next wait waits for news.
			unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOHANG, nil)
			w.tty.childStopped()
		default:
			return info.Code == cldKilled || info.Code == cldDumped
		}
	}
}
