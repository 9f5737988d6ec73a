package main

import (
	"context"
	"errors"

	"github.com/locking-center/locking-center/cluster"
	"github.com/locking-center/locking-center/manager"
)

// membership serves the management port's membership commands from a
// cluster node.
type membership struct{ cl *cluster.Cluster }

// membershipErrors maps the cluster's errors to the management port's.
var membershipErrors = []struct{ from, to error }{
	{cluster.ErrNoLeader, manager.ErrNoLeader},
	{cluster.ErrNotLeader, manager.ErrNoLeader},
	{cluster.ErrUnknownMember, manager.ErrUnknownMember},
	{cluster.ErrMemberExists, manager.ErrMemberExists},
	{cluster.ErrBadRequest, manager.ErrBadMember},
	{cluster.ErrLastVoter, manager.ErrLastVoter},
}

// managerError returns err, matching its management port error too.
func managerError(err error) error {
	for _, m := range membershipErrors {
		if errors.Is(err, m.from) {
			return &mappedError{err: err, as: m.to}
		}
	}
	return err
}

// mappedError is a cluster's error in its own words that matches a
// management port error as well.
type mappedError struct{ err, as error }

func (e *mappedError) Error() string   { return e.err.Error() }
func (e *mappedError) Unwrap() []error { return []error{e.err, e.as} }

func (m membership) Members(ctx context.Context) ([]manager.Member, error) {
	ms, err := m.cl.Members(ctx)
	if err != nil {
		return nil, managerError(err)
	}
	out := make([]manager.Member, len(ms))
	for i, x := range ms {
		out[i] = manager.Member{ID: x.ID, RaftAddress: x.RaftAddress, ClientAddress: x.ClientAddress, Voter: x.Voter,
			Leader: x.Leader, Reachable: x.Reachable, State: x.State, LastContact: x.LastContact, Applied: x.Applied}
	}
	return out, nil
}

func (m membership) AddMember(ctx context.Context, x manager.Member) error {
	return managerError(m.cl.AddMember(ctx, cluster.Peer{ID: x.ID, RaftAddress: x.RaftAddress, ClientAddress: x.ClientAddress}, x.Voter))
}

func (m membership) RemoveMember(ctx context.Context, id string) error {
	return managerError(m.cl.RemoveMember(ctx, id))
}

func (m membership) TransferLeadership(ctx context.Context, id string) error {
	return managerError(m.cl.TransferLeadership(ctx, id))
}
