package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/locking-center/locking-center/manager"
)

// splitAddresses returns the addresses of a comma list, blanks dropped,
// each once, in order.
func splitAddresses(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// managerAddressesOf derives the management address of each mutex
// address, as lcd lays out its ports (managerAddressOf).
func managerAddressesOf(mutexAddrs []string) ([]string, error) {
	out := make([]string, len(mutexAddrs))
	for i, a := range mutexAddrs {
		m, err := managerAddressOf(a)
		if err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

// managers reaches the management ports of the nodes of the global flags.
// The listings and the resets go to the leader of a cluster (a follower
// refuses them): a node that refuses one is asked which node leads, and
// the request goes to that node's management port. The membership
// commands go to any node that takes the connection.
type managers struct {
	mutex []string // the nodes' mutex addresses, as --address gives them
	addrs []string // their management addresses: addrs[i] is mutex[i]'s, when i < len(mutex)
	base  manager.Client
}

// Addr names the management ports, for messages.
func (m *managers) Addr() string { return strings.Join(m.addrs, ",") }

// client returns a client of the management port addrs[i].
func (m *managers) client(i int) *manager.Client {
	c := m.base
	c.Addr = m.addrs[i]
	return &c
}

// atLeader runs call at the leader's management port. It tries the nodes
// in turn while a connect fails (nothing was sent), and, when reads is
// set, while one does not answer in time (a listing is safe to ask again;
// a reset is not). A node that refuses is asked for the leader, and call
// goes there; a single lcd's refusal, or the leader's, is the answer. A
// cluster without a leader, or whose nodes still name one that is gone
// (an election), is asked again for as long as the timeout of one request.
func (m *managers) atLeader(ctx context.Context, reads bool, call func(context.Context, *manager.Client) error) error {
	var tried, gone []bool // per node of m.addrs, which grows when a leader is none of them
	mark := func(marks *[]bool, i int) {
		for len(*marks) < len(m.addrs) {
			*marks = append(*marks, false)
		}
		(*marks)[i] = true
	}
	untried := func() int {
		for i := range m.addrs {
			if i >= len(tried) || !tried[i] {
				return i
			}
		}
		return -1
	}
	i := 0
	deadline := time.Now().Add(m.base.ReadTimeout)
	pause := 50 * time.Millisecond
	for n := 0; n < 2*len(m.addrs)+2; n++ {
		c := m.client(i)
		err := call(ctx, c)
		if err == nil || ctx.Err() != nil {
			return err
		}
		mark(&tried, i)
		switch {
		case unreached(err) || reads && errors.Is(err, os.ErrDeadlineExceeded):
			mark(&gone, i)
			if i = untried(); i < 0 {
				return m.noneAnswered(err)
			}
		case errors.Is(err, manager.ErrFailed):
			j, lerr := m.leaderOf(ctx, c)
			switch {
			case lerr == nil && j >= 0 && j < len(gone) && gone[j]:
				lerr = errNotLeading // named, but it did not answer: the others have yet to elect another
			case lerr == nil && j == i:
				// The leader refused, and took the token for its member
				// list: it leads but does not serve yet (just elected),
				// or cannot confirm its lead (no quorum).
				lerr = errNotLeading
			}
			if errors.Is(lerr, errNotLeading) && time.Now().Add(pause).Before(deadline) {
				select {
				case <-ctx.Done():
					return err
				case <-time.After(pause):
				}
				pause = min(2*pause, 200*time.Millisecond)
				tried, gone = nil, nil
				n = 0    // the wait is bounded by the deadline
				continue // the same node: it names the leader once there is one
			}
			if lerr != nil {
				return fmt.Errorf("%w; %w", err, lerr)
			}
			if j < 0 {
				return err
			}
			i = j
		default:
			return err
		}
	}
	return fmt.Errorf("no leader answered at %s", m.Addr())
}

// errNotLeading is why a node that refused a request did not name a
// leader to send it to.
var errNotLeading = errors.New("the cluster has no leader now (an election under way, or no quorum)")

// leaderOf asks the node of c which node leads and returns that node's
// index in addrs, appending its management address (its mutex address's
// host, port+1) when it is none of the nodes given. It returns -1 for a
// single lcd, which has no cluster to name.
func (m *managers) leaderOf(ctx context.Context, c *manager.Client) (int, error) {
	ms, err := c.Members(ctx)
	if errors.Is(err, manager.ErrNotCluster) {
		return -1, nil
	}
	if err != nil {
		return -1, nil // it refuses this too (a token it does not take): its refusal stands
	}
	i := slices.IndexFunc(ms, func(x manager.Member) bool { return x.Leader })
	if i < 0 || ms[i].ClientAddress == "" {
		return -1, errNotLeading
	}
	leader := ms[i].ClientAddress
	if j := slices.Index(m.mutex, leader); j >= 0 && j < len(m.addrs) {
		return j, nil
	}
	addr, derr := managerAddressOf(leader)
	if derr != nil {
		return -1, fmt.Errorf("the leader's mutex port %s gives no management address: give it with --manager-address", leader)
	}
	if j := slices.Index(m.addrs, addr); j >= 0 {
		return j, nil
	}
	m.addrs = append(m.addrs, addr)
	return len(m.addrs) - 1, nil
}

// atAny runs call at the first node that takes the connection, for the
// membership commands, which every node serves; reads as for atLeader.
func (m *managers) atAny(ctx context.Context, reads bool, call func(context.Context, *manager.Client) error) error {
	var err error
	for i := range m.addrs {
		if err = call(ctx, m.client(i)); err == nil || ctx.Err() != nil {
			return err
		}
		if !unreached(err) && !(reads && errors.Is(err, os.ErrDeadlineExceeded)) {
			return err
		}
	}
	return m.noneAnswered(err)
}

// noneAnswered is err, the last node's, when no node of several took the
// request: it says so.
func (m *managers) noneAnswered(err error) error {
	if len(m.addrs) < 2 {
		return err
	}
	return fmt.Errorf("none of %s answered; the last: %w", m.Addr(), err)
}

// unreached reports whether err is a connect that reached no server
// (refused, unreachable, timed out): nothing was sent.
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
