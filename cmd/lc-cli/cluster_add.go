package main

import (
	"context"
	"fmt"
	"os"

	"github.com/locking-center/locking-center/manager"
	"github.com/spf13/cobra"
)

type clusterAddOptions struct {
	Signals <-chan os.Signal
	Manager *managers
	Member  manager.Member
}

func newClusterAddCommand(f *factory) *cobra.Command {
	opts := &clusterAddOptions{}
	nonvoter := false
	cmd := &cobra.Command{
		Use:   "add <id> <raft-address> [<client-address>]",
		Short: "Add a node to the cluster",
		Long: `cluster add adds the node <id> to the cluster. Start it first with
NODE_ID=<id>, an empty RAFT_DIR and no RAFT_PEERS: it waits to be added,
then takes the log from the leader. <raft-address> is where the other
nodes reach its raft port (host:port); <client-address>, where clients
reach its mutex port, may be left out: the node records its own once it
has joined.

It joins as a voter, or with --nonvoter as a nonvoter, which takes the
log but neither votes nor counts for a quorum. Adding a node that is
there with the same settings changes nothing. It prints nothing on
success.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || len(args) > 3 {
				return usagef("cluster add takes an id, a raft address and optionally a client address, got %d arguments (see lc-cli cluster add --help)", len(args))
			}
			m := manager.Member{ID: args[0], RaftAddress: args[1]}
			if len(args) == 3 {
				m.ClientAddress = args[2]
			}
			if err := checkMember(m); err != nil {
				return err
			}
			opts.Member = m
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := f.managers()
			if err != nil {
				return err
			}
			opts.Signals, opts.Manager = f.sys.Signals, m
			opts.Member.Voter = !nonvoter
			return runClusterAdd(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&nonvoter, "nonvoter", false, "add it as a nonvoter: it takes the log but does not vote")
	return cmd
}

func runClusterAdd(ctx context.Context, opts *clusterAddOptions) error {
	m := opts.Manager
	what := fmt.Sprintf("add member %q at %s", opts.Member.ID, m.Addr())
	return asFailure(interruptibly(ctx, opts.Signals, what, func(ctx context.Context) error {
		return m.atAny(ctx, false, func(ctx context.Context, c *manager.Client) error { return c.AddMember(ctx, opts.Member) })
	}, nil))
}
