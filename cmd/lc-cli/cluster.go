package main

import (
	"net"
	"strconv"
	"strings"

	"github.com/locking-center/locking-center/manager"
	"github.com/spf13/cobra"
)

// newClusterCommand is the parent of the membership commands.
func newClusterCommand(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster <list|add|remove|transfer>",
		Short: "List and change the nodes of a cluster of lcd nodes",
		Long: `cluster lists and changes the nodes of a cluster of lcd nodes (lcd with
NODE_ID), through the management port (--manager-address) of any node:
a node that does not lead passes changes on to the leader.

  list                          the nodes, their state and last contact
  add <id> <raft> [<client>]    add a node that waits to join (NODE_ID id, an
                                empty RAFT_DIR, no RAFT_PEERS); its raft port
                                is at <raft>, its mutex port at <client>
  remove <id>                   take a node out of the cluster
  transfer [<id>]               make <id> the leader, or any voter up to date

Each gives up after --timeout. See docs/ha.md.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("cluster takes a command: list, add, remove or transfer (see lc-cli cluster --help)")
			}
			return usagef("cluster: unknown command %q: want list, add, remove or transfer (see lc-cli cluster --help)", args[0])
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	cmd.AddCommand(
		newClusterListCommand(f),
		newClusterAddCommand(f),
		newClusterRemoveCommand(f),
		newClusterTransferCommand(f),
	)
	return cmd
}

// maxNodeID bounds a node id, in bytes.
const maxNodeID = 127

// checkNodeID rejects an id no node can have.
func checkNodeID(id string) error {
	switch {
	case id == "":
		return usagef("node id is empty")
	case len(id) > maxNodeID:
		return usagef("node id of %d bytes is too long: ids are at most %d bytes", len(id), maxNodeID)
	case strings.ContainsAny(id, "=, "):
		return usagef("node id %q: ids have no '=', ',' or spaces", id)
	}
	return nil
}

// checkHostPort rejects what is not host:port with a host the other
// nodes can dial (not 0.0.0.0 or ::) and a port of 1 to 65535.
func checkHostPort(what, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || len(addr) > 255 {
		return usagef("%s %q: want host:port", what, addr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return usagef("%s %q: name a host the other nodes can dial", what, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return usagef("%s %q: the port must be 1 to 65535", what, addr)
	}
	return nil
}

// checkMember rejects an id or address the server would refuse, before
// any connection.
func checkMember(m manager.Member) error {
	if err := checkNodeID(m.ID); err != nil {
		return err
	}
	if err := checkHostPort("raft address", m.RaftAddress); err != nil {
		return err
	}
	if m.ClientAddress != "" {
		return checkHostPort("client address", m.ClientAddress)
	}
	return nil
}
