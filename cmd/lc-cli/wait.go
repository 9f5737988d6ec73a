package main

import (
	"context"

	"github.com/spf13/cobra"
)

type waitOptions struct {
	keyRequest
}

func newWaitCommand(f *factory) *cobra.Command {
	opts := &waitOptions{}
	in := &keyInput{}
	cmd := &cobra.Command{
		Use:   "wait <key>",
		Short: "Block until a key is free, then return holding nothing",
		Long: `wait queues for the key like lock, and releases it the moment it is
granted: when wait exits 0 the key was free at some instant and this
source holds nothing. SIGINT, SIGTERM, SIGHUP or SIGQUIT while waiting
stop the wait (exit 128+N) and leave no request queued on the server.`,
		Args: in.oneKey,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.keyRequest = f.keyRequest(in.value)
			return runWait(cmd.Context(), opts)
		},
	}
	in.addFlags(cmd, "key")
	return cmd
}

func runWait(ctx context.Context, opts *waitOptions) error {
	// Wait releases its own grant, even one that raced a signal.
	return asFailure(opts.do(ctx, "wait", opts.Client.Wait, nil))
}
