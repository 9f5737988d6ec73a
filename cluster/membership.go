package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/locking-center/locking-center/mutex"
)

// Errors of membership changes.
var (
	// ErrNotLeader: this node does not lead the cluster (mutex.ErrNotLeader).
	ErrNotLeader = mutex.ErrNotLeader
	// ErrNoLeader: no leader was known, or none answered, in time.
	ErrNoLeader = errors.New("cluster: no leader answered")
	// ErrUnknownMember: no server of that id is in the configuration.
	ErrUnknownMember = errors.New("cluster: no member of that id")
	// ErrMemberExists: a member of that id, or at that raft address, is
	// in the configuration already, with other settings.
	ErrMemberExists = errors.New("cluster: the member exists with other settings")
	// ErrBadRequest: an id or address that cannot be a member's.
	ErrBadRequest = errors.New("cluster: bad request")
	// ErrLastVoter: removing the only voter would leave no cluster.
	ErrLastVoter = errors.New("cluster: the last voter cannot be removed")
)

// MaxIDLen bounds a node id, in bytes.
const MaxIDLen = 127

// Member is one server of the cluster's configuration, as a node sees it.
type Member struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft"`
	// ClientAddress is its mutex port as clients reach it: what the member
	// itself says when it answered, else what the log records; "" when
	// neither knows.
	ClientAddress string `json:"client"`
	// HTTPAddress is its HTTP API as the log records it; "" when none is.
	HTTPAddress string `json:"http,omitempty"`
	Voter       bool   `json:"voter"`  // false: a nonvoter, which follows the log but does not vote
	Leader      bool   `json:"leader"` // the leader, as the asking node knows it
	// From the member itself, when it answered (Reachable):
	Reachable bool   `json:"reachable"`
	State     string `json:"state,omitempty"` // Leader, Follower, Candidate
	// LastContact is how long ago the member last heard from a leader (its
	// raft's last contact): 0 for the leader, -1 when unknown (it never
	// has, or did not answer). In JSON, in nanoseconds.
	LastContact time.Duration `json:"last_contact"`
	// LastContactMS is LastContact in whole milliseconds, rounded down
	// (a follower heard from under 1 ms ago shows 0, as the leader does;
	// State tells them apart), -1 when unknown.
	LastContactMS int64  `json:"last_contact_ms"`
	Applied       uint64 `json:"applied"` // the last entry it applied
}

// newMember returns the member of server s as this node knows it without
// asking s: its addresses, suffrage, and whether it leads.
func (c *Cluster) newMember(s raft.Server, leader string) Member {
	rec, _ := c.fsm.member(string(s.ID))
	m := Member{ID: string(s.ID), RaftAddress: string(s.Address), ClientAddress: rec.ClientAddress,
		HTTPAddress: rec.HTTPAddress, Voter: s.Suffrage == raft.Voter, Leader: string(s.ID) == leader}
	m.setContact(-1)
	return m
}

// setContact sets LastContact and LastContactMS to d (-1: unknown).
func (m *Member) setContact(d time.Duration) {
	m.LastContact, m.LastContactMS = d, d.Milliseconds()
	if d < 0 {
		m.LastContact, m.LastContactMS = -1, -1
	}
}

// checkID reports an id that cannot be a node's, as ErrBadRequest; see
// idProblem.
func checkID(id string) error {
	if err := idProblem(id); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return nil
}

// idProblem reports an id that cannot be a node's: empty, longer than
// MaxIDLen, or holding a character of RAFT_PEERS' syntax or a control
// character.
func idProblem(id string) error {
	if id == "" || len(id) > MaxIDLen || strings.ContainsAny(id, "=, ") {
		return fmt.Errorf("node id %q: want 1 to %d bytes without '=', ',' or spaces", id, MaxIDLen)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("node id %q: control characters", id)
		}
	}
	return nil
}

// checkAddress reports what cannot be a member's address (see
// Dialable); what names it.
func checkAddress(what, addr string) error {
	if err := Dialable(addr); err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrBadRequest, what, addr, err)
	}
	return nil
}

// Dialable reports what makes addr unfit to be sent to other nodes and to
// clients as where to reach a node: not host:port (of at most 255 bytes),
// no host or one that means every interface (0.0.0.0, ::), or a port not
// of 1 to 65535. Nil: fit.
func Dialable(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || len(addr) > 255 {
		return errors.New("want host:port")
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return errors.New("name a host the other nodes can dial")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return errors.New("the port must be 1 to 65535")
	}
	return nil
}

// leaderID returns the id of the leader this node knows, "" for none.
func (c *Cluster) leaderID() string {
	_, id := c.raft.LeaderWithID()
	return string(id)
}

// leading returns nil when this node leads and serves, ErrNotLeader
// otherwise.
func (c *Cluster) leading() error {
	if c.raft.State() != raft.Leader || !c.ready.Load() {
		return ErrNotLeader
	}
	return nil
}

// raftError maps an error of raft that tells this node no longer leads to
// ErrNotLeader.
func raftError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return err
}

// apply appends an entry of this package's, waits for it to commit, and
// returns its position in the log.
func (c *Cluster) apply(b []byte) (uint64, error) {
	f := c.raft.Apply(b, c.cfg.ApplyTimeout)
	if err := raftError(c.await(f)); err != nil {
		return 0, err
	}
	return f.Index(), nil
}

// configuration returns the servers of the latest configuration.
func (c *Cluster) configuration() ([]raft.Server, error) {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, raftError(err)
	}
	return f.Configuration().Servers, nil
}

// server returns the server of id in the configuration.
func server(servers []raft.Server, id string) (raft.Server, bool) {
	for _, s := range servers {
		if string(s.ID) == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

// member returns the server of id in the latest configuration, and all
// of them. Errors: ErrUnknownMember, or raft's.
func (c *Cluster) member(id string) (raft.Server, []raft.Server, error) {
	servers, err := c.configuration()
	if err != nil {
		return raft.Server{}, nil, err
	}
	s, ok := server(servers, id)
	if !ok {
		return raft.Server{}, nil, fmt.Errorf("%w: %q", ErrUnknownMember, id)
	}
	return s, servers, nil
}

// recordMember records p's addresses in the log, at the leader, when
// they differ from what the log holds, and returns the position by which
// the log records them: the entry it wrote (wrote true), or the last
// entry applied here when the log held them already. p must be in the
// configuration, at the raft address it has there.
func (c *Cluster) recordMember(p Peer) (index uint64, wrote bool, err error) {
	if err := c.leading(); err != nil {
		return 0, false, err
	}
	if err := checkAddress("client address", p.ClientAddress); err != nil {
		return 0, false, err
	}
	if p.HTTPAddress != "" {
		if err := checkAddress("HTTP address", p.HTTPAddress); err != nil {
			return 0, false, err
		}
	}
	s, _, err := c.member(p.ID)
	if err != nil {
		return 0, false, err
	}
	if string(s.Address) != p.RaftAddress {
		return 0, false, fmt.Errorf("%w: %s is at raft address %s in the configuration, not %s", ErrBadRequest, p.ID, s.Address, p.RaftAddress)
	}
	if r, ok := c.fsm.logged(p.ID); ok && r == p {
		return c.fsm.applied.Load(), false, nil
	}
	index, err = c.apply(memberEntry(p))
	return index, err == nil, err
}

// addMember adds p to the configuration, as a voter or a nonvoter, at the
// leader; with a client address, it records that first. Adding a member
// that is there with the same settings changes nothing.
func (c *Cluster) addMember(p Peer, voter bool) error {
	if err := c.leading(); err != nil {
		return err
	}
	if err := checkID(p.ID); err != nil {
		return err
	}
	if err := checkAddress("raft address", p.RaftAddress); err != nil {
		return err
	}
	if p.ClientAddress != "" {
		if err := checkAddress("client address", p.ClientAddress); err != nil {
			return err
		}
	}
	servers, err := c.configuration()
	if err != nil {
		return err
	}
	for _, s := range servers {
		switch {
		case string(s.ID) == p.ID && string(s.Address) == p.RaftAddress && (s.Suffrage == raft.Voter) == voter:
			if p.ClientAddress == "" {
				return nil
			}
			if r, ok := c.fsm.logged(p.ID); ok {
				p.Batches = r.Batches // what the node recorded of itself
			}
			_, _, err := c.recordMember(p)
			return err
		case string(s.ID) == p.ID:
			return fmt.Errorf("%w: %s is a member at raft address %s (%s)", ErrMemberExists, s.ID, s.Address, suffrage(s.Suffrage == raft.Voter))
		case string(s.Address) == p.RaftAddress:
			return fmt.Errorf("%w: raft address %s is member %s's", ErrMemberExists, s.Address, s.ID)
		}
	}
	if err := c.answers(p); err != nil {
		return err
	}
	if p.ClientAddress != "" {
		if _, err := c.apply(memberEntry(p)); err != nil {
			return err
		}
	}
	var f raft.IndexFuture
	if voter {
		f = c.raft.AddVoter(raft.ServerID(p.ID), raft.ServerAddress(p.RaftAddress), 0, c.cfg.ApplyTimeout)
	} else {
		f = c.raft.AddNonvoter(raft.ServerID(p.ID), raft.ServerAddress(p.RaftAddress), 0, c.cfg.ApplyTimeout)
	}
	if err := raftError(c.await(f)); err != nil {
		return err
	}
	c.log.Info("member added", slog.String(logMember, p.ID), slog.String("raft", p.RaftAddress),
		slog.String("suffrage", suffrage(voter)))
	return nil
}

// answers checks, before p becomes a member, that the node answers a
// status request at p's raft address, over the path raft will take (TLS
// between the nodes included), and that it is p.ID: a member nobody can
// reach (an address mistyped, a node not started yet, one whose
// certificate the others refuse) would count towards the quorum as a
// voter, and take nothing as a nonvoter. Errors: ErrBadRequest, saying
// why.
func (c *Cluster) answers(p Peer) error {
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	resp, err := c.call(ctx, raft.ServerAddress(p.RaftAddress), controlRequest{Op: opStatus})
	switch {
	case err != nil:
		return fmt.Errorf("%w: no node answers at raft address %s (%v); start %s first, with NODE_ID=%s, an empty RAFT_DIR and no RAFT_PEERS",
			ErrBadRequest, p.RaftAddress, err, p.ID, p.ID)
	case resp.Node == nil || resp.Node.ID != p.ID:
		id := ""
		if resp.Node != nil {
			id = resp.Node.ID
		}
		return fmt.Errorf("%w: the node at raft address %s is %q, not %s", ErrBadRequest, p.RaftAddress, id, p.ID)
	}
	return nil
}

func suffrage(voter bool) string {
	if voter {
		return "voter"
	}
	return "nonvoter"
}

// removeMember takes the member of id out of the configuration, at the
// leader, and forgets its addresses. A leader that removes itself hands
// over to the rest as the change commits.
func (c *Cluster) removeMember(id string) error {
	if err := c.leading(); err != nil {
		return err
	}
	s, servers, err := c.member(id)
	if err != nil {
		return err
	}
	voters := 0
	for _, x := range servers {
		if x.Suffrage == raft.Voter {
			voters++
		}
	}
	if s.Suffrage == raft.Voter && voters == 1 {
		return fmt.Errorf("%w: %s", ErrLastVoter, id)
	}
	if _, err := c.apply(forgetEntry(id)); err != nil {
		return err
	}
	if err := raftError(c.await(c.raft.RemoveServer(s.ID, 0, c.cfg.ApplyTimeout))); err != nil {
		return err
	}
	c.log.Info("member removed", slog.String(logMember, id))
	return nil
}

// transfer hands the leadership to the voter of id, or to the most
// up-to-date voter when id is "" (ErrBadRequest when there is no other),
// and returns once it has.
func (c *Cluster) transfer(id string) error {
	if err := c.leading(); err != nil {
		return err
	}
	if id == "" {
		servers, err := c.configuration()
		if err != nil {
			return err
		}
		other := false
		for _, s := range servers {
			other = other || s.Suffrage == raft.Voter && string(s.ID) != c.cfg.NodeID
		}
		if !other {
			return fmt.Errorf("%w: no other voter to hand the leadership to", ErrBadRequest)
		}
		return raftError(c.await(c.raft.LeadershipTransfer()))
	}
	if id == c.cfg.NodeID {
		return nil
	}
	s, _, err := c.member(id)
	if err != nil {
		return err
	}
	if s.Suffrage != raft.Voter {
		return fmt.Errorf("%w: %s is a nonvoter and cannot lead", ErrBadRequest, id)
	}
	return raftError(c.await(c.raft.LeadershipTransferToServer(s.ID, s.Address)))
}

// AddMember adds the node p to the cluster, as a voter (or, with voter
// false, a nonvoter), at the leader: here, or forwarded to the leader's
// raft port. The node must be running, with its NODE_ID and an empty
// RAFT_DIR and no peers: it then takes the log from the leader. Its
// client address may be left empty; the node records its own once it
// has joined. Errors: ErrBadRequest, ErrMemberExists, ErrNoLeader, or
// raft's.
func (c *Cluster) AddMember(ctx context.Context, p Peer, voter bool) error {
	_, err := c.atLeader(ctx, controlRequest{Op: opAdd, ID: p.ID, Raft: p.RaftAddress, Client: p.ClientAddress, Voter: voter}, nil)
	return err
}

// RemoveMember takes the node of id out of the cluster, at the leader.
// The removed node stops taking part; stop it and empty its RAFT_DIR
// before it is used again. Errors: ErrUnknownMember, ErrLastVoter,
// ErrNoLeader, or raft's.
//
// Removing the leader ends its leadership as the change commits, and the
// answer may be lost with it; RemoveMember then asks the next leader,
// which no longer knows id. When this node had id in its configuration
// at the start and an attempt was cut that way, ErrUnknownMember from a
// later attempt means the removal is done, and RemoveMember returns nil.
func (c *Cluster) RemoveMember(ctx context.Context, id string) error {
	_, _, unknown := c.member(id)
	cut := false
	_, err := c.atLeader(ctx, controlRequest{Op: opRemove, ID: id}, func(error) { cut = true })
	if unknown == nil && cut && errors.Is(err, ErrUnknownMember) {
		return nil
	}
	return err
}

// TransferLeadership makes the voter of id the leader (the most
// up-to-date voter when id is ""), and returns once it leads. Errors:
// ErrUnknownMember, ErrBadRequest (a nonvoter, or no voter but this one
// for ""), ErrNoLeader, or raft's.
func (c *Cluster) TransferLeadership(ctx context.Context, id string) error {
	_, err := c.atLeader(ctx, controlRequest{Op: opTransfer, ID: id}, nil)
	return err
}

// nodeStatus returns what this node answers a status request with.
func (c *Cluster) nodeStatus() nodeStatus {
	st := nodeStatus{ID: c.cfg.NodeID, State: c.raft.State().String(), Term: c.raft.CurrentTerm(),
		LastContact: -1, Applied: c.fsm.applied.Load(), Client: c.cfg.ClientAddress}
	switch last := c.raft.LastContact(); {
	case c.raft.State() == raft.Leader:
		st.LastContact = 0
	case !last.IsZero():
		st.LastContact = int64(max(time.Since(last), 0))
	}
	return st
}

// Members returns the servers of the cluster's configuration as this
// node knows it, sorted by id, each with what it says of itself when it
// answers within ctx (at most 2 s): its state, its last contact with a
// leader and its applied position. Errors: raft's, when this node has no
// configuration.
func (c *Cluster) Members(ctx context.Context) ([]Member, error) {
	servers, err := c.configuration()
	if err != nil {
		return nil, err
	}
	leader := c.leaderID()
	out := make([]Member, len(servers))
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, s := range servers {
		m := &out[i]
		*m = c.newMember(s, leader)
		if m.ID == c.cfg.NodeID {
			m.fill(c.nodeStatus())
			continue
		}
		wg.Go(func() {
			resp, err := c.call(ctx, s.Address, controlRequest{Op: opStatus})
			if err == nil && resp.Node != nil && resp.Node.ID == m.ID {
				m.fill(*resp.Node)
			}
		})
	}
	wg.Wait()
	sortMembers(out)
	return out, nil
}

// fill sets what the member said of itself.
func (m *Member) fill(st nodeStatus) {
	m.Reachable, m.State, m.Applied = true, st.State, st.Applied
	m.setContact(time.Duration(st.LastContact))
	if st.Client != "" {
		m.ClientAddress = st.Client
	}
}

func sortMembers(ms []Member) {
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && ms[j].ID < ms[j-1].ID; j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

// msgRemoved is logged once by a node that finds it was removed from its
// cluster.
const msgRemoved = "this node was removed from its cluster: it takes no part in raft and answers every v1 request '-'; " +
	"stop it, and to bring it back empty its RAFT_DIR and add it again"

// keepAddress runs until Close: while this node follows, it asks the
// leader to record its addresses whenever the log holds others (it came
// back on a new client address, or it was added without one), so that
// every node names it, and forwards to it, where it is now. Once the
// leader has answered, it asks again only after it has applied the log
// up to the position the leader named and the log still holds others
// there: a node that catches up with a long log asks once. A node that
// finds it was removed says so once (msgRemoved).
func (c *Cluster) keepAddress() {
	defer c.wg.Done()
	ticks := c.addressTicks
	if ticks == nil {
		t := time.NewTicker(max(c.cfg.ElectionTimeout, 50*time.Millisecond))
		defer t.Stop()
		ticks = t.C
	}
	self := c.self()
	var answered uint64 // the position the leader named in its last answer
	told := false       // that this node was removed
	for {
		select {
		case <-ticks:
		case <-c.quit:
			return
		}
		if !c.inConfiguration() {
			if !told && c.removed() {
				c.log.Warn(msgRemoved)
				told = true
			}
			continue // not a member (yet, or any more)
		}
		if r, ok := c.fsm.logged(self.ID); ok && r == self || c.raft.State() == raft.Leader ||
			c.fsm.applied.Load() < answered {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ForwardTimeout)
		resp, err := c.atLeader(ctx, controlRequest{Op: opMember, ID: self.ID, Raft: self.RaftAddress, Client: self.ClientAddress, HTTP: self.HTTPAddress,
			Batches: self.Batches}, nil)
		cancel()
		switch {
		case err != nil:
			c.log.Debug("the leader did not record this node's addresses", slog.Any(logError, err))
			continue
		case resp.Recorded:
			c.log.Info("this node's addresses recorded", slog.String("client", self.ClientAddress),
				slog.Uint64(logIndex, resp.Index))
		default:
			c.log.Debug("the leader's log holds this node's addresses", slog.Uint64(logIndex, resp.Index))
		}
		answered = resp.Index
	}
}
