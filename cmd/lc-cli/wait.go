package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

type waitOptions struct {
	sessionRequest
}

func newWaitCommand(f *factory) *cobra.Command {
	opts := &waitOptions{}
	in := &keyInput{}
	cmd := &cobra.Command{
		Use:   "wait <key>",
		Short: "Block until a key is free, then return holding nothing",
		Long: `wait queues for the key in a session, like lock --, and releases it the
moment it is granted: when wait exits 0 the key was free at some instant
and this source holds nothing. SIGINT, SIGTERM, SIGHUP or SIGQUIT while waiting
stop the wait (exit 128+N) and leave no request queued on the server.`,
		Args: in.oneKey,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.sessionRequest = f.sessionRequest(in.value, 0)
			return runWait(cmd.Context(), opts)
		},
	}
	in.addFlags(cmd, "key")
	return cmd
}

// runWait waits for the key in a session and releases it at once. A
// session, not v1: a release lost with its connection (a leader that dies
// at that moment) is sent again on the resumed session, and one that is
// lost for good ends with the session's TTL, where a v1 lock would stay
// held until a reset.
func runWait(ctx context.Context, opts *waitOptions) error {
	what := describe("wait", opts.Key, opts.Client.Addr())
	sess, err := opts.open(ctx, what)
	if err != nil {
		return asFailure(err)
	}
	defer sess.Close()
	lock, err := acquire(ctx, opts.Signals, what, sess, opts.Key)
	if err != nil {
		return asFailure(err)
	}
	if err := lock.Release(); err != nil {
		return failure(fmt.Errorf("%s: release: %w (the server frees the key within the session's TTL, %v)", what, err, sess.TTL()))
	}
	if err := sess.Close(); err != nil {
		return failure(fmt.Errorf("%s: close the session: %w", what, err))
	}
	return nil
}
