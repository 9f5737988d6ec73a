//go:build unix

package main

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminal is lc-cli's controlling terminal, which it lends to the
// command's process group while it is in the terminal's foreground. fd is
// -1 when no stream is the controlling terminal. Only the goroutine that
// waits for the command uses it, until the command has ended.
type terminal struct {
	fd     int
	pgrp   int  // lc-cli's own process group
	child  int  // the command's process group, once started
	handed bool // the command's group is the foreground by lc-cli's doing
}

// ownGroup makes cmd start in a process group of its own. When one of the
// streams is the controlling terminal and lc-cli's group is its
// foreground, the new group becomes the foreground as the command starts,
// so that it can read the terminal and gets the keys that send signals
// (^C, ^\, ^Z).
func ownGroup(cmd *exec.Cmd, streams ...any) *terminal {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t := &terminal{fd: -1, pgrp: unix.Getpgrp()}
	for _, s := range streams {
		f, ok := s.(*os.File)
		if !ok {
			continue
		}
		fd := int(f.Fd())
		fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		if err != nil {
			continue // not a terminal, or not lc-cli's
		}
		t.fd = fd
		if fg == t.pgrp {
			cmd.SysProcAttr.Foreground = true
			cmd.SysProcAttr.Ctty = fd
			t.handed = true
		}
		return t
	}
	return t
}

// started records the command's process group.
func (t *terminal) started(p *os.Process) { t.child = p.Pid }

// restore gives the terminal back to lc-cli's group if lc-cli lent it.
// It is safe to call more than once.
func (t *terminal) restore() {
	if t.fd < 0 || !t.handed {
		return
	}
	t.setForeground(t.pgrp)
	t.handed = false
}

// childStopped acts like a shell for the command, which has just been
// stopped: when the command held the terminal (^Z) or lc-cli is in the
// background, lc-cli takes the terminal back and stops its own group, so
// the shell above sees the job stop; a stop signal sent to an orphaned
// group is discarded, and lc-cli then goes on at once. When lc-cli is in
// the foreground, or brought there again, it lends the terminal to the
// command and continues it.
func (t *terminal) childStopped() {
	if t.handed || !t.isForeground() {
		t.restore()
		syscall.Kill(-t.pgrp, syscall.SIGTSTP)
	}
	if t.isForeground() {
		t.setForeground(t.child)
		t.handed = true
	}
	syscall.Kill(-t.child, syscall.SIGCONT)
}

// setForeground makes pgrp the terminal's foreground group. A process
// outside the foreground that changes it gets SIGTTOU, which would stop
// lc-cli; it is ignored for the call.
func (t *terminal) setForeground(pgrp int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, pgrp)
}

// isForeground reports whether lc-cli's group is the terminal's foreground.
func (t *terminal) isForeground() bool {
	fg, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	return err == nil && fg == t.pgrp
}

// signalGroup sends sig to the command's process group.
func signalGroup(p *os.Process, sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	syscall.Kill(-p.Pid, s)
	switch s {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		// A stopped process acts on a signal only once it runs again:
		// continue the group, as a shell's kill does for a stopped job.
		syscall.Kill(-p.Pid, syscall.SIGCONT)
	}
}

// killGroup kills whatever is left of the command's process group.
func killGroup(p *os.Process) {
	syscall.Kill(-p.Pid, syscall.SIGKILL)
}
