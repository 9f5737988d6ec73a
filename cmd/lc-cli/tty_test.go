//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func init() { helpers["jobshell"] = jobShell }

// jobShell is the least of a job-control shell, on its terminal (stdin):
// it starts its arguments as a job in the background (a process group of
// their own), waits for the job to stop, brings it to the foreground and
// continues it, as fg does, and exits with the job's exit code.
func jobShell() int {
	args := os.Args[1:]
	job, err := os.StartProcess(args[0], args, &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		fmt.Println("jobshell:", err)
		return 100
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(job.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		fmt.Printf("jobshell: job did not stop: %v %v\n", err, ws)
		return 101
	}
	fmt.Println("jobshell: job stopped")
	signal.Ignore(syscall.SIGTTOU)
	unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, job.Pid)
	syscall.Kill(-job.Pid, syscall.SIGCONT)
	for {
		_, err = syscall.Wait4(job.Pid, &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp())
	if err != nil || !ws.Exited() {
		fmt.Printf("jobshell: job did not exit: %v %v\n", err, ws)
		return 102
	}
	return ws.ExitStatus()
}

// pty is a pseudo-terminal: the test holds the master side, lc-cli gets
// the other side as its controlling terminal.
type pty struct {
	master *os.File
	slave  *os.File
	output syncBuffer    // everything written to the terminal
	read   chan struct{} // closed when the master reads end of input
}

// openPTY opens a pseudo-terminal, skipping the test where there is none.
func openPTY(t *testing.T) *pty {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(m)
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		unix.Close(m)
		t.Fatalf("pty number: %v", err)
	}
	s, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(m)
		t.Skipf("open pty %d: %v", n, err)
	}
	unix.SetNonblock(m, true) // so that Close ends a pending read
	p := &pty{master: os.NewFile(uintptr(m), "ptmx"), slave: os.NewFile(uintptr(s), "pts"), read: make(chan struct{})}
	go func() {
		defer close(p.read)
		io.Copy(&p.output, p.master)
	}()
	t.Cleanup(func() {
		p.master.Close()
		p.slave.Close()
		<-p.read
	})
	return p
}

// setTOSTOP makes the terminal stop (or, for an orphaned process group,
// refuse) writes from a process group outside its foreground.
func (p *pty) setTOSTOP(t *testing.T) {
	t.Helper()
	fd := int(p.slave.Fd())
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag |= unix.TOSTOP
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
}

// start runs the built lc-cli in a new session whose controlling terminal
// is p, the way a login shell would, with p as stdin, stdout and stderr.
func (p *pty) start(t *testing.T, environ []string, args ...string) *exec.Cmd {
	t.Helper()
	return p.startProgram(t, binary, environ, args...)
}

// startProgram is start for any program.
func (p *pty) startProgram(t *testing.T, program string, environ []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(program, args...)
	cmd.Env = append(withoutLC(os.Environ()), environ...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.slave, p.slave, p.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	// Only lc-cli and its command keep the terminal open from now on.
	p.slave.Close()
	return cmd
}

// wait waits for the program to exit and for its output to be read.
func (p *pty) wait(t *testing.T, cmd *exec.Cmd) (exitCode, string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(patience):
		cmd.Process.Kill()
		<-done
		t.Fatalf("lc-cli did not exit; the terminal shows %q", p.output.String())
	}
	select {
	case <-p.read:
	case <-time.After(patience):
		t.Fatalf("the terminal stays open after lc-cli exited; it shows %q", p.output.String())
	}
	return exitCode(cmd.ProcessState.ExitCode()), p.output.String()
}

// foregroundScript reports whether its process group is the terminal's
// foreground from the start, reads a line from the terminal, then stops
// itself: it goes on only if lc-cli passes the stop up and continues it.
const foregroundScript = `read -r _ _ _ _ pgrp _ _ tpgid _ < /proc/$$/stat
[ "$pgrp" = "$tpgid" ] && echo "foreground:yes"
read line; echo "got:$line"
kill -STOP $$; echo resumed`

func TestTerminalGoesToTheCommand(t *testing.T) {
	s := startServer(t, nil)
	p := openPTY(t)
	cmd := p.start(t, s.environ(), "lock", "tty", "--", "sh", "-c", foregroundScript)
	if _, err := p.master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	code, out := p.wait(t, cmd)
	for _, want := range []string{"foreground:yes", "got:hello", "resumed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal shows %q, without %q", out, want)
		}
	}
	if code != exitOK {
		t.Errorf("exit %d, want 0", code)
	}
	if _, held := s.holders(t)["tty"]; held {
		t.Error("key still held after the command ended")
	}
}

// TestTerminalComesBackBeforeLcCliWrites ends a command while the server
// is gone, so that lc-cli must report the failed release on the terminal.
// With TOSTOP set, that write only goes through if lc-cli took the
// terminal's foreground back when its command ended.
func TestTerminalComesBackBeforeLcCliWrites(t *testing.T) {
	s := startServer(t, nil)
	p := openPTY(t)
	p.setTOSTOP(t)
	cmd := p.start(t, append(s.environ(), "LC_TIMEOUT=500ms"), "lock", "tty", "--", "sh", "-c", "read line")
	eventually(t, "the key to be held", func() bool {
		_, held := s.holders(t)["tty"]
		return held
	})
	s.close()
	if _, err := p.master.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	code, out := p.wait(t, cmd)
	if code != exitFailure || !strings.Contains(out, "lc-cli: release \"tty\" at "+s.addr) {
		t.Errorf("exit %d, terminal shows %q; want 2 and the failed release", code, out)
	}
}

// TestBackgroundJobGetsTheTerminalWhenBroughtBack starts lc-cli in the
// background of a job-control shell. Its command reads the terminal, so it
// stops; lc-cli stops its own job in turn. Once the shell brings the job to
// the foreground, lc-cli lends the terminal to the command and continues
// it.
func TestBackgroundJobGetsTheTerminalWhenBroughtBack(t *testing.T) {
	s := startServer(t, nil)
	p := openPTY(t)
	env := append(s.environ(), helperEnv+"=jobshell", "GORACE=atexit_sleep_ms=0")
	cmd := p.startProgram(t, os.Args[0], env, binary, "lock", "bg", "--", "sh", "-c", `read line; echo "got:$line"`)
	eventually(t, "the job to stop", func() bool { return strings.Contains(p.output.String(), "jobshell: job stopped") })
	if _, err := p.master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	code, out := p.wait(t, cmd)
	if code != exitOK || !strings.Contains(out, "got:hello") {
		t.Errorf("exit %d, terminal shows %q; want 0 and got:hello", code, out)
	}
	if _, held := s.holders(t)["bg"]; held {
		t.Error("key still held after the command ended")
	}
}
