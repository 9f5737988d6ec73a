package main

import (
	"context"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/locking-center/locking-center/manager"
	"github.com/spf13/cobra"
)

type clusterListOptions struct {
	Stdout  io.Writer
	Signals <-chan os.Signal
	Manager *managers
	Output  outputFormat // -o
}

func newClusterListCommand(f *factory) *cobra.Command {
	opts := &clusterListOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the nodes of the cluster",
		Long: `cluster list prints the nodes of the cluster, one row each, sorted by id,
as the node at --manager-address knows them, with what each node says of
itself (it is asked, for at most 2 s):

  ID            the node's id (NODE_ID)
  RAFT          the address of its raft port
  CLIENT        the address of its mutex port, - when unknown
  SUFFRAGE      voter, or nonvoter (it takes the log but does not vote)
  LEADER        * for the leader
  STATE         Leader, Follower or Candidate; unreachable when it did not answer
  LAST-CONTACT  how long since it last heard from the leader; - for the leader
                itself, or when unknown
  APPLIED       the position of the last log entry it applied`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := f.managers()
			if err != nil {
				return err
			}
			opts.Stdout, opts.Signals, opts.Manager = cmd.OutOrStdout(), f.sys.Signals, m
			return runClusterList(cmd.Context(), opts)
		},
	}
	addOutputFlag(cmd, &opts.Output, `{"members":[...]}`)
	return cmd
}

// jsonMember is a row of cluster list in JSON.
type jsonMember struct {
	ID            string  `json:"id"`
	Raft          string  `json:"raft"`
	Client        *string `json:"client"` // null when unknown
	Voter         bool    `json:"voter"`
	Leader        bool    `json:"leader"`
	Reachable     bool    `json:"reachable"`
	State         *string `json:"state"`           // null when it did not answer
	LastContactMS *int64  `json:"last_contact_ms"` // null for the leader, or when unknown
	Applied       *uint64 `json:"applied"`         // null when it did not answer
}

// membersJSON returns ms as cluster list -o json prints them.
func membersJSON(ms []manager.Member) []jsonMember {
	out := []jsonMember{}
	for _, x := range ms {
		m := jsonMember{ID: x.ID, Raft: x.RaftAddress, Client: jsonOptional(x.ClientAddress), Voter: x.Voter,
			Leader: x.Leader, Reachable: x.Reachable}
		if x.Reachable {
			m.State, m.Applied = jsonOptional(x.State), &x.Applied
			if x.LastContact >= 0 && x.State != "Leader" {
				ms := jsonMillis(x.LastContact)
				m.LastContactMS = &ms
			}
		}
		out = append(out, m)
	}
	return out
}

func runClusterList(ctx context.Context, opts *clusterListOptions) error {
	m := opts.Manager
	var ms []manager.Member
	err := interruptibly(ctx, opts.Signals, "list members at "+m.Addr(), func(ctx context.Context) (err error) {
		return m.atAny(ctx, true, func(ctx context.Context, c *manager.Client) (err error) {
			ms, err = c.Members(ctx)
			return err
		})
	}, nil)
	if err != nil {
		return asFailure(err)
	}
	if opts.Output == outputJSON {
		return writeJSON(opts.Stdout, struct {
			Members []jsonMember `json:"members"`
		}{membersJSON(ms)})
	}
	t := table{
		header: []string{"ID", "RAFT", "CLIENT", "SUFFRAGE", "LEADER", "STATE", "LAST-CONTACT", "APPLIED"},
		right:  []bool{false, false, false, false, false, false, true, true},
	}
	for _, x := range ms {
		suffrage, leader, state, contact, applied := "nonvoter", "", "unreachable", "-", "-"
		if x.Voter {
			suffrage = "voter"
		}
		if x.Leader {
			leader = "*"
		}
		if x.Reachable {
			state = x.State
			applied = strconv.FormatUint(x.Applied, 10)
			if x.LastContact >= 0 && x.State != "Leader" {
				contact = formatContact(x.LastContact)
			}
		}
		t.rows = append(t.rows, []string{cell(x.ID), cell(x.RaftAddress), cell(x.ClientAddress), suffrage, leader,
			state, contact, applied})
	}
	_, err = io.WriteString(opts.Stdout, t.String())
	return err
}

// formatContact prints a last contact: in milliseconds under a second
// (heartbeats come every few tens of them), else as formatHeld does.
func formatContact(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	return formatHeld(d)
}
