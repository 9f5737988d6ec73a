package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
)

// Defaults of Config.
const (
	// DefaultElectionTimeout is how long a follower goes without hearing
	// from a leader before it stands for election, and how long a
	// candidate waits for votes; raft draws each wait at random from one
	// to two times it.
	DefaultElectionTimeout = 500 * time.Millisecond
	// DefaultApplyTimeout bounds the wait for a command to enter the
	// leader's log.
	DefaultApplyTimeout = 10 * time.Second
	// DefaultSnapshotThreshold is how many entries the log gathers after a
	// snapshot before the next one is taken.
	DefaultSnapshotThreshold = 8192
	// DefaultSnapshotInterval is how often the node checks whether a
	// snapshot is due.
	DefaultSnapshotInterval = 2 * time.Minute
	// DefaultTrailingLogs is how many entries a snapshot leaves in the
	// log, so that a follower a little behind catches up from the log
	// rather than from a whole snapshot.
	DefaultTrailingLogs = 10240
	// DefaultRetainSnapshots is how many snapshots RAFT_DIR keeps.
	DefaultRetainSnapshots = 2
	// DefaultForwardTimeout bounds how long a v1 request that reached a
	// follower waits for a leader to be known, and its dial of the
	// leader.
	DefaultForwardTimeout = 5 * time.Second
)

// MinSessionTTL returns the shortest session TTL that a cluster with
// election timeout et may grant: a session must outlive one and a half
// elections, so that its client finds the new leader in time.
func MinSessionTTL(et time.Duration) time.Duration { return et + et/2 }

// Peer is one node of the cluster as the others know it.
type Peer struct {
	// ID names the node for ever; it must not be reused by another node.
	ID string
	// RaftAddress is where the other nodes reach its raft port, host:port.
	RaftAddress string
	// ClientAddress is where clients reach its mutex port, host:port: the
	// address a follower names when it sends a client to the leader, and
	// where it forwards v1 requests.
	ClientAddress string
	// HTTPAddress is where clients reach its HTTP API, host:port: where a
	// follower forwards HTTP requests. "" when the node has no HTTP API,
	// or has not recorded it yet (RAFT_PEERS does not name it).
	HTTPAddress string
	// Batches reports that the node reads batch entries (kind 4 of the
	// package's log entries): a leader gathers commands into batches only
	// once the log records this of every member of the configuration.
	// A node sets it of itself; it is false in what RAFT_PEERS and the
	// management port name, and in the records of lcd before batches.
	Batches bool
}

// PeerTLS is the TLS of the connections between the nodes of a cluster
// (Config.TLS); tlsconf.Peer is one. Each method is called for each
// connection, so that certificates reloaded meanwhile take effect.
type PeerTLS interface {
	// Server returns the config of the raft port's listener. It should
	// require and verify a certificate of the dialling node: the port
	// serves whoever completes the handshake.
	Server() *tls.Config
	// Client returns the config of a dial to another node's raft port;
	// host is the host of the node's raft address (an IP address or a
	// DNS name), which its certificate must name.
	Client(host string) *tls.Config
	// Leader returns the config of a dial to the leader's mutex port to
	// forward a v1 request; host is the host of its client address.
	Leader(host string) *tls.Config
}

// Config configures one node of a cluster.
type Config struct {
	// NodeID is this node's id; it must be among Peers when Peers are
	// given.
	NodeID string
	// RaftBind is the address the raft transport listens on, host:port.
	RaftBind string
	// RaftListener, when set, is the raft port already bound (socket
	// activation, tests); RaftBind then only names it. Start takes it
	// over: Close closes it, and so does a Start that fails.
	RaftListener net.Listener
	// RaftAdvertise is where the other nodes reach this node's raft port;
	// empty means this node's RaftAddress in Peers, else RaftBind. It may
	// not be an unspecified address (0.0.0.0, ::).
	RaftAdvertise string
	// ClientAddress is where clients reach this node's mutex port; empty
	// means this node's ClientAddress in Peers.
	ClientAddress string
	// HTTPAddress is where clients reach this node's HTTP API, recorded in
	// the log beside ClientAddress; empty: it has none.
	HTTPAddress string
	// Dir holds the raft log and stable store (raft.db, or wal/, see
	// LogStore) and the snapshots (snapshots/). It is created when
	// missing.
	Dir string
	// LogStore: see DefaultLogStore (LogStoreBoltDB). A Dir that holds the
	// other store's files is refused (ErrOtherLogStore).
	LogStore LogStore
	// Peers are the nodes of a new cluster, this node included. A node
	// whose Dir holds no state bootstraps a cluster of them; a node with
	// state ignores them but for the client addresses it knows no better
	// ones of. A node with no state and no Peers waits to be added to a
	// cluster.
	Peers []Peer
	// Dial maps node ids to the addresses this node dials to reach their
	// raft ports, in place of their RaftAddress (a NAT, a tunnel, a proxy).
	Dial map[string]string
	// TLS, when set, puts everything this node says to the others under
	// TLS: the raft port (raft's RPCs and the control requests) and the
	// v1 requests it forwards to the leader's mutex port. Nil: plain TCP.
	TLS PeerTLS
	// ElectionTimeout: see DefaultElectionTimeout (500 ms). The leader's
	// lease is half of it: a leader that has not heard from a quorum for
	// that long steps down.
	ElectionTimeout time.Duration
	// ApplyTimeout: see DefaultApplyTimeout (10 s).
	ApplyTimeout time.Duration
	// ForwardTimeout: see DefaultForwardTimeout (5 s).
	ForwardTimeout time.Duration
	// SnapshotThreshold, SnapshotInterval, TrailingLogs: see their
	// defaults (8192 entries, 2 min, 10240 entries).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// Logger receives the node's logs and raft's; nil discards them.
	Logger *slog.Logger
	// OnLeader, when set, is called after the node became the leader
	// (true, its restart applied) or stopped being it (false). It is
	// called from one goroutine, one call after another; it must not
	// block for long.
	OnLeader func(leader bool)
}

// ParsePeers parses RAFT_PEERS: comma-separated id=raftaddr=clientaddr;
// a peer's client address may be left out (id=raftaddr), and is then
// known once that node has led. Errors: a peer not of that form, an
// address that is not Dialable, an id or a raft address given twice.
func ParsePeers(s string) ([]Peer, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Peer
	seen := map[string]bool{}
	raftOf := map[string]string{} // raft address -> the id that has it
	for _, item := range strings.Split(s, ",") {
		parts := strings.Split(strings.TrimSpace(item), "=")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
			return nil, fmt.Errorf("peer %q: want id=raftaddress=clientaddress", item)
		}
		p := Peer{ID: parts[0], RaftAddress: parts[1]}
		if len(parts) == 3 {
			p.ClientAddress = parts[2]
		}
		for _, a := range []string{p.RaftAddress, p.ClientAddress} {
			if a == p.ClientAddress && a == "" {
				continue
			}
			if err := Dialable(a); err != nil {
				return nil, fmt.Errorf("peer %q: address %q: %w", p.ID, a, err)
			}
		}
		if seen[p.ID] {
			return nil, fmt.Errorf("peer %q given twice", p.ID)
		}
		if other, ok := raftOf[p.RaftAddress]; ok {
			return nil, fmt.Errorf("peers %q and %q have one raft address %s", other, p.ID, p.RaftAddress)
		}
		seen[p.ID] = true
		raftOf[p.RaftAddress] = p.ID
		out = append(out, p)
	}
	return out, nil
}

// ParseDial parses RAFT_DIAL: comma-separated id=address.
func ParseDial(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || id == "" {
			return nil, fmt.Errorf("dial %q: want id=address", item)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("dial %q: %w", id, err)
		}
		out[id] = addr
	}
	return out, nil
}

// self returns this node's entry of Peers.
func (c *Config) self() (Peer, bool) {
	for _, p := range c.Peers {
		if p.ID == c.NodeID {
			return p, true
		}
	}
	return Peer{}, false
}

// withDefaults fills in what was left zero.
func (c Config) withDefaults() Config {
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.ApplyTimeout == 0 {
		c.ApplyTimeout = DefaultApplyTimeout
	}
	if c.ForwardTimeout == 0 {
		c.ForwardTimeout = DefaultForwardTimeout
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.LogStore == "" {
		c.LogStore = DefaultLogStore
	}
	self, ok := c.self()
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftBind
		if ok {
			c.RaftAdvertise = self.RaftAddress
		}
	}
	if c.ClientAddress == "" && ok {
		c.ClientAddress = self.ClientAddress
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.NodeID == "":
		return errors.New("cluster: a node id is needed")
	case c.Dir == "":
		return errors.New("cluster: a raft directory is needed")
	case c.ElectionTimeout < 10*time.Millisecond:
		return fmt.Errorf("cluster: election timeout %v is under 10ms", c.ElectionTimeout)
	case c.ApplyTimeout < 0 || c.ForwardTimeout < 0:
		return errors.New("cluster: timeouts must not be negative")
	}
	if _, err := ParseLogStore(string(c.LogStore)); err != nil {
		return err
	}
	for _, p := range append([]Peer{{ID: c.NodeID}}, c.Peers...) {
		if err := idProblem(p.ID); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	if _, _, err := net.SplitHostPort(c.RaftBind); err != nil {
		return fmt.Errorf("cluster: raft address %q: %w", c.RaftBind, err)
	}
	host, _, err := net.SplitHostPort(c.RaftAdvertise)
	if err != nil {
		return fmt.Errorf("cluster: raft advertise address %q: %w", c.RaftAdvertise, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("cluster: raft advertise address %q: the other nodes need an address they can dial", c.RaftAdvertise)
	}
	if c.ClientAddress == "" {
		return errors.New("cluster: this node's client address is needed (in its peer entry, or on its own)")
	}
	if _, _, err := net.SplitHostPort(c.ClientAddress); err != nil {
		return fmt.Errorf("cluster: client address %q: %w", c.ClientAddress, err)
	}
	if len(c.Peers) > 0 {
		self, ok := c.self()
		if !ok {
			return fmt.Errorf("cluster: node %q is not among the peers", c.NodeID)
		}
		if self.RaftAddress != c.RaftAdvertise {
			return fmt.Errorf("cluster: node %q: its peer entry names raft address %s, but it advertises %s",
				c.NodeID, self.RaftAddress, c.RaftAdvertise)
		}
	}
	return nil
}
