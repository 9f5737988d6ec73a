package main

import (
	"context"
	"fmt"
	"os"

	"github.com/locking-center/locking-center/manager"
	"github.com/spf13/cobra"
)

type clusterTransferOptions struct {
	Signals <-chan os.Signal
	Manager *managers
	ID      string // "": any voter that is up to date
}

func newClusterTransferCommand(f *factory) *cobra.Command {
	opts := &clusterTransferOptions{}
	return &cobra.Command{
		Use:   "transfer [<id>]",
		Short: "Hand the leadership to another node",
		Long: `cluster transfer makes the voter <id> the leader, or, without an id, the
voter most up to date; it returns once the leadership has moved, for
maintenance of the leader's host without an election timeout. Sessions
resume at the new leader; v1 requests parked at the old one are
withdrawn and asked again by their clients. It prints nothing on success.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch len(args) {
			case 0:
				return nil
			case 1:
				opts.ID = args[0]
				return checkNodeID(opts.ID)
			}
			return usagef("cluster transfer takes at most one node id, got %d arguments (see lc-cli cluster transfer --help)", len(args))
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := f.managers()
			if err != nil {
				return err
			}
			opts.Signals, opts.Manager = f.sys.Signals, m
			return runClusterTransfer(cmd.Context(), opts)
		},
	}
}

func runClusterTransfer(ctx context.Context, opts *clusterTransferOptions) error {
	m := opts.Manager
	what := fmt.Sprintf("transfer leadership to %q at %s", opts.ID, m.Addr())
	if opts.ID == "" {
		what = "transfer leadership at " + m.Addr()
	}
	return asFailure(interruptibly(ctx, opts.Signals, what, func(ctx context.Context) error {
		return m.atAny(ctx, false, func(ctx context.Context, c *manager.Client) error { return c.TransferLeadership(ctx, opts.ID) })
	}, nil))
}
