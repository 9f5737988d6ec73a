//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// signalNames are the relayed signals by their shell names.
var signalNames = map[syscall.Signal]string{
	syscall.SIGINT:  "INT",
	syscall.SIGTERM: "TERM",
	syscall.SIGHUP:  "HUP",
	syscall.SIGQUIT: "QUIT",
}

// forEachMode runs f as a subtest per mode and per relayed signal.
func forEachMode(t *testing.T, f func(t *testing.T, m mode, sig syscall.Signal, name string)) {
	for _, m := range modes {
		for sig, name := range signalNames {
			t.Run(m.name+"/"+name, func(t *testing.T) { f(t, m, sig, name) })
		}
	}
}

func TestSignalWhileQueuedLeavesNoWaiter(t *testing.T) {
	s := startServer(t, nil)
	forEachMode(t, func(t *testing.T, m mode, sig syscall.Signal, _ string) {
		marker := filepath.Join(t.TempDir(), "ran")
		s.hold(t, "q", "holder")
		r := m.start(t, s.environ(), "lock", "q", "--", "touch", marker)
		s.waitWaiters(t, "q", 1)
		r.signal(sig)
		res := r.wait(t)
		if res.code != signalCode(sig) {
			t.Errorf("exit %d, want %d", res.code, signalCode(sig))
		}
		oneLine(t, res.stderr, "interrupted", s.addr)
		s.waitWaiters(t, "q", 0)
		s.release(t, "q")
		s.waitFree(t, "q")
		if _, err := os.Stat(marker); err == nil {
			t.Error("the command ran although lc-cli was stopped while waiting")
		}
	})
}

func TestSignalWhileWaitingForWaitOrPlainLock(t *testing.T) {
	s := startServer(t, nil)
	for _, m := range modes {
		for _, cmd := range []string{"wait", "lock"} {
			s.hold(t, "q", "holder")
			r := m.start(t, s.environ(), cmd, "q")
			s.waitWaiters(t, "q", 1)
			r.signal(syscall.SIGINT)
			if res := r.wait(t); res.code != 130 {
				t.Errorf("%s %s interrupted: exit %d %q, want 130", m.name, cmd, res.code, res.stderr)
			}
			s.waitWaiters(t, "q", 0)
			s.release(t, "q")
			s.waitFree(t, "q")
		}
	}
}

// trapScript is a shell that reports sig and exits 7 on it, after
// starting a background sleep (which a non-interactive shell starts with
// SIGINT and SIGQUIT ignored) and writing that sleep's pid to pidFile.
func trapScript(sig, pidFile string) string {
	return fmt.Sprintf(`trap 'echo got %[1]s; exit 7' %[1]s; sleep 1000 & echo $! > %[2]s; wait`, sig, pidFile)
}

// dieScript is a shell that does not handle signals: it dies of them, and
// leaves its background sleep behind unless lc-cli takes care of it.
func dieScript(pidFile string) string {
	return fmt.Sprintf(`sleep 1000 & echo $! > %s; wait`, pidFile)
}

// TestNothingOutlivesACommandThatCaughtASignal: the command handles the
// signal and exits 7; its background sleep, which ignores SIGINT and
// SIGQUIT, must not outlive it.
func TestNothingOutlivesACommandThatCaughtASignal(t *testing.T) {
	s := startServer(t, nil)
	forEachMode(t, func(t *testing.T, m mode, sig syscall.Signal, name string) {
		pidFile := filepath.Join(t.TempDir(), "pid")
		r := m.start(t, s.environ(), "lock", "k", "--", "sh", "-c", trapScript(name, pidFile))
		sleeper := readPID(t, pidFile)
		if _, held := s.holders(t)["k"]; !held {
			t.Fatal("key not held while the command runs")
		}
		r.signal(sig)
		res := r.wait(t)
		if res.code != 7 || res.stdout != "got "+name+"\n" || res.stderr != "" {
			t.Errorf("exit %d, stdout %q, stderr %q; want 7 and %q", res.code, res.stdout, res.stderr, "got "+name)
		}
		if _, held := s.holders(t)["k"]; held {
			t.Error("key still held when lc-cli exited")
		}
		eventually(t, "the command's background process to end", func() bool { return processGone(sleeper) })
	})
}

// reporterArgs runs the test binary as signalReporter's outer process
// under lock.
func reporterArgs(key string) []string {
	return []string{"lock", key, "--", os.Args[0]}
}

// reporterEnviron adds the reporter's role to environ. A test binary
// built with -race would otherwise pause a second as it exits.
func reporterEnviron(environ []string) []string {
	return append(append([]string(nil), environ...), helperEnv+"=outer", "GORACE=atexit_sleep_ms=0")
}

// TestSignalsReachEveryProcessOfTheCommand: the command and the process it
// started both catch the signal, and the command's exit code comes through.
func TestSignalsReachEveryProcessOfTheCommand(t *testing.T) {
	s := startServer(t, nil)
	forEachMode(t, func(t *testing.T, m mode, sig syscall.Signal, _ string) {
		r := m.start(t, reporterEnviron(s.environ()), reporterArgs("k")...)
		eventually(t, "the command to be ready", func() bool {
			out := r.output()
			return strings.Contains(out, "outer ready\n") && strings.Contains(out, "inner ready\n")
		})
		r.signal(sig)
		res := r.wait(t)
		for _, want := range []string{"outer got " + sig.String(), "inner got " + sig.String()} {
			if !strings.Contains(res.stdout, want+"\n") {
				t.Errorf("stdout %q lacks %q", res.stdout, want)
			}
		}
		if res.code != 3 || res.stderr != "" {
			t.Errorf("exit %d %q, want the command's 3", res.code, res.stderr)
		}
		if _, held := s.holders(t)["k"]; held {
			t.Error("key still held when lc-cli exited")
		}
	})
}

// TestNoGrandchildOutlivesAShellKilledBySignal: the command dies of the
// signal; its background sleep, which ignores SIGINT and SIGQUIT, must not
// outlive it.
func TestNoGrandchildOutlivesAShellKilledBySignal(t *testing.T) {
	s := startServer(t, nil)
	forEachMode(t, func(t *testing.T, m mode, sig syscall.Signal, _ string) {
		pidFile := filepath.Join(t.TempDir(), "pid")
		r := m.start(t, s.environ(), "lock", "k", "--", "sh", "-c", dieScript(pidFile))
		sleeper := readPID(t, pidFile)
		r.signal(sig)
		res := r.wait(t)
		if res.code != signalCode(sig) || res.stderr != "" {
			t.Errorf("exit %d %q, want %d: the shell died of the signal", res.code, res.stderr, signalCode(sig))
		}
		if _, held := s.holders(t)["k"]; held {
			t.Error("key still held when lc-cli exited")
		}
		eventually(t, "the orphaned sleep to end", func() bool { return processGone(sleeper) })
	})
}

// TestSignalAtTheGrant sends the signal around the moment the key is
// granted, many times and in varied order: whatever wins, no key is left
// held by an interrupted lc-cli and nobody is left queued.
func TestSignalAtTheGrant(t *testing.T) {
	s := startServer(t, nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rounds := map[string]int{"in-process": 200, "binary": 60}[m.name]
			if testing.Short() {
				rounds /= 4
			}
			counts := map[string]int{}
			for i := range rounds {
				withCommand := i%2 == 0
				args := []string{"lock", "race"}
				if withCommand {
					args = append(args, "--", "true")
				}
				s.hold(t, "race", "holder")
				r := m.start(t, append(s.environ(), "LC_SOURCE=racer"), args...)
				s.waitWaiters(t, "race", 1)
				s.raceGrant(t, "race", i, func() { r.signal(syscall.SIGTERM) })
				counts[s.checkRaceOutcome(t, i, r.wait(t), withCommand, "racer")]++
			}
			t.Logf("outcomes over %d rounds: %v", rounds, counts)
		})
	}
}

// raceGrant releases key, held by the test, so that its one waiter gets
// it, and calls signal at a moment that depends on round: at the same time
// as the release, as soon as the table shows the grant, or a little after.
func (s *testServer) raceGrant(t *testing.T, key string, round int, signal func()) {
	t.Helper()
	switch round % 3 {
	case 0:
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			s.release(t, key)
		})
		wg.Go(func() {
			<-start
			signal()
		})
		close(start)
		wg.Wait()
	case 1:
		go s.release(t, key)
		eventually(t, "the grant to the waiter", func() bool {
			h, held := s.table.Holder(key)
			return !held || h.Source != "holder"
		})
		signal()
	default:
		s.release(t, key)
		spin := time.Duration(round%20) * 50 * time.Microsecond
		for start := time.Now(); time.Since(start) < spin; {
		}
		signal()
	}
}

// checkRaceOutcome checks how one round of raceGrant ended and names the
// outcome: interrupted (the key ends free), killed (the command died of
// the signal, the key ends free), ran (the command ran, the key ends free)
// or kept (plain lock won and exited 0 holding the key).
func (s *testServer) checkRaceOutcome(t *testing.T, round int, r result, withCommand bool, source string) string {
	t.Helper()
	switch {
	case r.code == 143 && withCommand && r.stderr == "":
		s.waitFree(t, "race")
		return "killed"
	case r.code == 143:
		oneLine(t, r.stderr, "interrupted")
		s.waitFree(t, "race")
		if strings.Contains(r.stderr, "granted at that moment") {
			return "granted, then released"
		}
		return "interrupted"
	case r.code == exitOK && withCommand:
		s.waitFree(t, "race")
		return "ran"
	case r.code == exitOK:
		if h, held := s.holders(t)["race"]; !held || h.Source != source {
			t.Fatalf("round %d: lock exited 0 but the key is not held by lc-cli (held %v by %q)", round, held, h.Source)
		}
		s.release(t, "race")
		s.waitFree(t, "race")
		return "kept"
	default:
		t.Fatalf("round %d: exit %d %q", round, r.code, r.stderr)
		return ""
	}
}

// processGone reports whether pid has ended: no such process, or a zombie
// nobody has reaped yet.
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// readPID waits for a shell to write a pid and a newline to path.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		_, err = fmt.Sscan(string(b), &pid)
		return err == nil
	})
	return pid
}

// A command stopped by SIGSTOP still ends on a forwarded signal: the group
// is continued after the signal, so the key is released.
func TestStoppedCommandEndsOnSignal(t *testing.T) {
	s := startServer(t, nil)
	forEachMode(t, func(t *testing.T, m mode, sig syscall.Signal, name string) {
		pidFile := filepath.Join(t.TempDir(), "pid")
		script := "echo $$ > " + pidFile + "; kill -STOP $$; echo resumed"
		r := m.start(t, s.environ(), "lock", "stopped", "--", "sh", "-c", script)
		pid := readPID(t, pidFile)
		eventually(t, "the command to stop", func() bool { return processState(pid) == "T" })
		r.signal(sig)
		res := r.wait(t)
		if res.code != exitCode(128+int(sig)) {
			t.Errorf("exit %d, want %d", res.code, 128+int(sig))
		}
		if _, held := s.holders(t)["stopped"]; held {
			t.Error("key still held when lc-cli exited")
		}
	})
}

// processState returns the one-letter state of pid from /proc, or "" when
// it is gone or unreadable.
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}
