package main

import (
	"context"

	"github.com/spf13/cobra"
)

type unlockOptions struct {
	keyRequest
}

func newUnlockCommand(f *factory) *cobra.Command {
	opts := &unlockOptions{}
	return &cobra.Command{
		Use:   "unlock <key>",
		Short: "Release a key, whoever holds it",
		Long: `unlock releases the key through the mutex port (--address), whoever holds
it; the first queued request, if any, gets it next. Releasing a key that
is not held succeeds too. It prints nothing on success.`,
		Args:              oneKey,
		ValidArgsFunction: f.completeHeld(func() bool { return false }),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.keyRequest = f.keyRequest(args[0])
			return runUnlock(cmd.Context(), opts)
		},
	}
}

func runUnlock(ctx context.Context, opts *unlockOptions) error {
	return asFailure(opts.do(ctx, "unlock", opts.Client.Unlock, nil))
}
