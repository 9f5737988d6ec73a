// Command lc-cli inspects and resets a Locking-Center lock table through the
// management port, and takes, waits for and releases locks through the
// mutex port, so a shell script can serialize work without a program.
//
// Exit codes: 0 success; 1 trylock found the key held by another; 2 any
// failure, reported on one line of stderr; 127 the command of `lock --`
// could not be started; otherwise `lock --` exits with its command's code,
// or 128+N when the command (or lc-cli, while it waited) ended by signal N.
// See lc-cli --help and docs/cli.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
)

// version and commit are stamped by the release build with
// -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "none"
)

// exitCode is what lc-cli returns to its caller.
type exitCode int

// Exit codes of lc-cli. A command run by `lock --` passes its own code
// through, so codes other than these occur too.
const (
	exitOK         exitCode = 0
	exitBusy       exitCode = 1   // trylock: another holds the key
	exitFailure    exitCode = 2   // bad usage, invalid key, server or network failure
	exitCannotRun  exitCode = 127 // lock --: the command could not be started
	exitSignalBase exitCode = 128 // + N: ended by signal N
)

// usageError is input lc-cli rejects before contacting any server: a bad
// flag, a missing argument, an invalid key or source.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a usageError with a formatted message.
func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// exitError ends lc-cli with code. A nil err ends it silently: trylock's
// "held by another" and the exit code of a command run by `lock --`.
type exitError struct {
	code exitCode
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// system is what lc-cli takes from its process. main fills it from os;
// tests fill it with buffers, a fixed environment and their own signals.
type system struct {
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	Environ  []string         // KEY=value pairs
	Hostname string           // for the default source; empty gives "lc-cli"
	Signals  <-chan os.Signal // SIGINT, SIGTERM, SIGHUP and SIGQUIT as they arrive
	Location *time.Location   // zone of the times keys -d prints; nil means time.Local
}

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, relayedSignals...)
	host, _ := os.Hostname()
	code := execute(os.Args[1:], system{
		Stdin:    os.Stdin,
		Stdout:   os.Stdout,
		Stderr:   os.Stderr,
		Environ:  os.Environ(),
		Hostname: host,
		Signals:  sigs,
	})
	os.Exit(int(code))
}

// execute runs lc-cli with args on sys and returns its exit code. A
// failure is reported as one line on sys.Stderr.
func execute(args []string, sys system) exitCode {
	root, f := newRootCommand(sys)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			msg := ee.err
			if ee.code == exitFailure {
				msg = f.hint(msg)
			}
			report(sys.Stderr, msg)
		}
		return ee.code
	}
	var ue *usageError
	if !errors.As(err, &ue) {
		// cobra's own errors (an unknown command, with its suggestions
		// on lines of their own) are usage errors too.
		err = usagef("%s (see lc-cli --help)", strings.Join(strings.Fields(err.Error()), " "))
	}
	report(sys.Stderr, err)
	return exitFailure
}

// report writes err to w as one line, prefixed "lc-cli: ".
func report(w io.Writer, err error) {
	msg := strings.NewReplacer("\r", " ", "\n", " ").Replace(err.Error())
	fmt.Fprintf(w, "lc-cli: %s\n", msg)
}
