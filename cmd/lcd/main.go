// Command lcd is the Locking-Center server: the mutex port, the management
// port, the Prometheus metrics endpoint and the HTTP API of one lock table.
//
// Every setting is a flag and an environment variable of the same meaning;
// a flag given on the command line wins. See lcd --help.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes of lcd.
const (
	exitOK      = 0
	exitRuntime = 1 // a listener failed while serving, or could not bind
	exitUsage   = 2 // bad flags or environment
	exitStore   = 4 // DATA_PATH cannot be opened, is locked, or is corrupt
)

// exitError carries the exit code of a failure to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// version and commit are stamped by the release build with -ldflags -X.
var (
	version = "dev"
	commit  = "none"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// After the first signal starts the graceful shutdown, a second one
	// gets the default action and ends the process at once.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is lcd without the process: arguments, environment and output are
// injected, and it returns the exit code.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	cmd := newRootCommand(ctx, environ, stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		fmt.Fprintf(stderr, "lcd: %v\n", ee.err)
		return ee.code
	}
	fmt.Fprintf(stderr, "lcd: %v\n", err)
	return exitUsage
}

func newRootCommand(ctx context.Context, environ []string, stdout, stderr io.Writer) *cobra.Command {
	var opts options
	cmd := &cobra.Command{
		Use:   "lcd",
		Short: "Locking-Center lock server",
		Long: "lcd grants named locks over TCP and HTTP, one holder per key, waiters served in order of arrival.\n\n" +
			"Ports: mutex (BIND_ADDRESS, default :22119), management (port+1), metrics (port+2),\n" +
			"HTTP API and status page (port+3; HTTP_ADDRESS=\"\" turns it off),\n" +
			"and for a node of a cluster (NODE_ID) raft (port+4).\n" +
			"Each flag can also be set by the environment variable named in its help.",
		Version:       fmt.Sprintf("%s (commit %s)", version, commit),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := opts.config(cmd.Flags(), environ)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			log := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
			return serve(ctx, cfg, log)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetContext(ctx)
	cmd.SetVersionTemplate("lcd {{.Version}}\n")
	opts.register(cmd.Flags())
	cmd.AddCommand(newHealthCommand(ctx, environ))
	return cmd
}

func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	o := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}
