package main

import (
	"context"
	"fmt"
	"os"

	"github.com/locking-center/locking-center/manager"
	"github.com/spf13/cobra"
)

type clusterRemoveOptions struct {
	Signals <-chan os.Signal
	Manager *managers
	ID      string
}

func newClusterRemoveCommand(f *factory) *cobra.Command {
	opts := &clusterRemoveOptions{}
	return &cobra.Command{
		Use:   "remove <id>",
		Short: "Take a node out of the cluster",
		Long: `cluster remove takes the node <id> out of the cluster. A leader that is
removed hands over to the others. The removed node stops taking part:
stop it, and empty its RAFT_DIR before it serves again. The last voter
cannot be removed. It prints nothing on success.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("cluster remove takes one node id, got %d arguments (see lc-cli cluster remove --help)", len(args))
			}
			opts.ID = args[0]
			return checkNodeID(opts.ID)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := f.managers()
			if err != nil {
				return err
			}
			opts.Signals, opts.Manager = f.sys.Signals, m
			return runClusterRemove(cmd.Context(), opts)
		},
	}
}

func runClusterRemove(ctx context.Context, opts *clusterRemoveOptions) error {
	m := opts.Manager
	what := fmt.Sprintf("remove member %q at %s", opts.ID, m.Addr())
	return asFailure(interruptibly(ctx, opts.Signals, what, func(ctx context.Context) error {
		return m.atAny(ctx, false, func(ctx context.Context, c *manager.Client) error { return c.RemoveMember(ctx, opts.ID) })
	}, nil))
}
