package main

import (
	"context"
	"errors"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/spf13/cobra"
)

type tryLockOptions struct {
	keyRequest
}

func newTryLockCommand(f *factory) *cobra.Command {
	opts := &tryLockOptions{}
	in := &keyInput{}
	cmd := &cobra.Command{
		Use:   "trylock <key>",
		Short: "Take a key only if it is free now",
		Long: `trylock takes the key if nobody holds it at this moment and never queues.

Exit 0: the key is now held by this source and stays held after lc-cli
exits, until unlock or reset. Exit 1: somebody else holds it; nothing is
printed. Exit 2: the request failed (server unreachable, refused, too
slow to accept the connection, or no answer within --timeout); that is
never reported as exit 1.`,
		Args: in.oneKey,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.keyRequest = f.keyRequest(in.value)
			return runTryLock(cmd.Context(), opts)
		},
	}
	in.addFlags(cmd, "key")
	return cmd
}

func runTryLock(ctx context.Context, opts *tryLockOptions) error {
	err := opts.do(ctx, "trylock", opts.Client.TryLock, opts.release)
	switch {
	case errors.Is(err, lockingcenter.ErrBusy):
		return &exitError{code: exitBusy}
	case err != nil:
		return asFailure(err)
	}
	return nil
}
