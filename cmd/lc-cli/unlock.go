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
	in := &keyInput{}
	cmd := &cobra.Command{
		Use:   "unlock <key>",
		Short: "Release a key, whoever holds it",
		Long: `unlock releases the key through the mutex port (--address), whoever holds
it; the first queued request, if any, gets it next. Releasing a key that
is not held succeeds too. It prints nothing on success.`,
		Args:              in.oneKey,
		ValidArgsFunction: f.completeHeld(in, func() bool { return false }),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.keyRequest = f.keyRequest(in.value)
			return runUnlock(cmd.Context(), opts)
		},
	}
	in.addFlags(cmd, "key")
	return cmd
}

func runUnlock(ctx context.Context, opts *unlockOptions) error {
	return asFailure(opts.do(ctx, "unlock", opts.unlock, nil))
}
