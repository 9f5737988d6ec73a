package main

import (
	"context"
	"errors"
	"io"
	"time"
	"unicode/utf8"

	lockingcenter "github.com/locking-center/locking-center/clients/go"

	"github.com/spf13/cobra"
)

type lockOptions struct {
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	Environ []string // the command's environment
	keyRequest
	Command []string // after --: run while holding Key, then release it; empty keeps Key held

	session       sessionLockFlags       // with a command: the session and the acquire
	clientOptions []lockingcenter.Option // with a command: source and timeouts of the session
	timeout       time.Duration          // the read timeout, for messages
	token         string                 // with a command: the session's token

	NoWait bool          // -n: take the key only if it is free now, else exit 1
	Wait   time.Duration // -w: wait at most this long, else exit 1; 0: as long as it takes
}

// sessionRequest is the session of a lock with a command.
func (o *lockOptions) sessionRequest() sessionRequest {
	return sessionRequest{keyRequest: o.keyRequest, clientOptions: o.clientOptions, token: o.token, ttl: o.session.TTL,
		timeout: o.timeout}
}

// waitOptions are -n and -w as acquire options of a session.
func (o *lockOptions) waitOptions() []lockingcenter.AcquireOption {
	switch {
	case o.NoWait:
		return []lockingcenter.AcquireOption{lockingcenter.TryOnce()}
	case o.Wait > 0:
		return []lockingcenter.AcquireOption{lockingcenter.WithWait(o.Wait)}
	}
	return nil
}

func newLockCommand(f *factory) *cobra.Command {
	opts := &lockOptions{}
	in := &keyInput{}
	cmd := &cobra.Command{
		Use:   "lock <key> [-- <command> [args...]]",
		Short: "Take a key, waiting for it; with a command, run it holding the key",
		Long: `lock queues for the key through the mutex port (--address) until it is
granted, however long that takes. SIGINT, SIGTERM, SIGHUP or SIGQUIT while
waiting stop the wait with exit 128+N; no request is left queued, and a
key granted at that very instant is released again.

Without a command the key stays held after lc-cli exits, until unlock or
reset (protocol v1).

With a command after --, lock holds the key through a session of the
session protocol: if lc-cli dies (even by SIGKILL) or loses the server,
the key is freed once the session's TTL (--ttl) passes. The command gets
the lock's fencing token in LC_FENCING_TOKEN and the key in LC_LOCK_KEY;
pass the token to what it changes, so that a late writer is refused. If
the lock is lost while the command runs (the session expired, a reset),
its process group gets SIGTERM, then SIGKILL 10s later, and lc-cli exits
2. --shared, --limit and --priority ask for the key in those modes.

lock runs the command once the key is granted, with the
terminal (stdin, stdout, stderr) attached, and releases the key when the
command ends, whatever the outcome. lc-cli then exits with the command's
exit code, 128+N if it died of signal N, or 127 if it could not be
started. The command runs in a process group of its own, which gets the
terminal's foreground while the command runs; SIGINT, SIGTERM, SIGHUP and
SIGQUIT sent to lc-cli go to that whole group. If the command ends by a
signal, or after one was passed on, whatever is left of its group is
killed before the key is released. If the release fails, lc-cli exits 2.

-n takes the key only if it is free now, else exits 1 at once; -w D waits
at most D, else exits 1 with the request withdrawn (-w 0 is -n); both
work with a command and without, as flock's.

A key that starts with '-' follows a first --: lock -- -key -- command.`,
		Args: func(cmd *cobra.Command, args []string) error {
			key, command, err := splitLockArgs(args, cmd.ArgsLenAtDash())
			if err != nil {
				return err
			}
			opts.Command = command
			if err := opts.checkWait(cmd); err != nil {
				return err
			}
			if len(command) == 0 && opts.session.set(cmd) {
				return usagef("lock: --ttl, --lock-delay, --shared, --limit, --priority and --note need a command after -- (see lc-cli lock --help)")
			}
			if n := opts.session.Note; len(n) > lockingcenter.MaxNoteLen || !utf8.ValidString(n) {
				return usagef("lock: --note must be UTF-8 of at most %d bytes (it is %d)", lockingcenter.MaxNoteLen, len(n))
			}
			return in.setKey(key)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Stdin = f.sys.Stdin
			opts.Stdout = f.sys.Stdout
			opts.Stderr = f.sys.Stderr
			opts.Environ = f.sys.Environ
			opts.keyRequest = f.keyRequest(in.value)
			opts.clientOptions, opts.timeout, opts.token = f.clientOptions(), f.global.Timeout, f.global.Token
			return runLock(cmd.Context(), opts)
		},
	}
	in.addFlags(cmd, "key")
	opts.session.addFlags(cmd)
	cmd.Flags().BoolVarP(&opts.NoWait, "nonblock", "n", false, "take the key only if it is free now; else exit 1 at once (as flock -n)")
	cmd.Flags().DurationVarP(&opts.Wait, "wait", "w", 0, "wait at most this long for the key; else exit 1, the request withdrawn (as flock -w; 0 is -n)")
	return cmd
}

// checkWait refuses -n beside -w and a negative -w, and makes -w 0 -n.
func (o *lockOptions) checkWait(cmd *cobra.Command) error {
	waitSet := cmd.Flags().Changed("wait")
	switch {
	case o.NoWait && waitSet:
		return usagef("lock: -n and -w exclude each other (see lc-cli lock --help)")
	case o.Wait < 0:
		return usagef("lock: -w %v: want a duration of 0 or more, such as 10s", o.Wait)
	case waitSet && o.Wait == 0:
		o.NoWait = true
	}
	return nil
}

// splitLockArgs separates the key from the command. dash is the number of
// arguments before the first --, or -1 when there is none.
func splitLockArgs(args []string, dash int) (key string, command []string, err error) {
	usage := func() (string, []string, error) {
		return "", nil, usagef("lock takes one key, then optionally -- and a command (see lc-cli lock --help)")
	}
	switch {
	case dash == -1 && len(args) == 1:
		return args[0], nil, nil
	case dash == 1:
		command = args[1:]
	case dash == 0 && len(args) == 1:
		return args[0], nil, nil
	case dash == 0 && len(args) > 1 && args[1] == "--":
		command = args[2:] // lock -- -key -- command
	default:
		return usage()
	}
	if len(command) == 0 {
		return "", nil, usagef("lock: no command after -- (see lc-cli lock --help)")
	}
	return args[0], command, nil
}

func runLock(ctx context.Context, opts *lockOptions) error {
	if len(opts.Command) > 0 {
		return runSessionLock(ctx, opts)
	}
	if opts.NoWait {
		return runTryLock(ctx, &tryLockOptions{keyRequest: opts.keyRequest})
	}
	if opts.Wait == 0 {
		return asFailure(opts.do(ctx, "lock", opts.Client.Lock, opts.release))
	}
	// -w: the wait ends with the connection, which withdraws the request.
	ranOut := false
	err := opts.do(ctx, "lock", func(ctx context.Context, key string) error {
		ctx, cancel := context.WithTimeout(ctx, opts.Wait)
		defer cancel()
		err := opts.Client.Lock(ctx, key)
		ranOut = err != nil && ctx.Err() == context.DeadlineExceeded
		return err
	}, opts.release)
	var signaled *exitError
	if ranOut && !errors.As(err, &signaled) {
		return &exitError{code: exitBusy}
	}
	return asFailure(err)
}
