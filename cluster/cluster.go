package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/store"
)

// Log attribute keys.
const (
	logComponent = "component"
	logIndex     = "index"
	logKeys      = "keys"
	logError     = "error"
	logNode      = "node"
	logLeader    = "leader"
	logTerm      = "term"
	logDir       = "dir"
	logMember    = "member"
	logRemote    = "remote"
)

// Errors of the package.
var (
	// ErrLocked: another process has Config.Dir open.
	ErrLocked = errors.New("cluster: the raft directory is in use by another process")
	// ErrClosed: the cluster node was closed.
	ErrClosed = errors.New("cluster: closed")
)

// transportPool and transportTimeout configure raft's TCP transport: the
// connections kept per peer, and the I/O deadline of one RPC.
const (
	transportPool    = 3
	transportTimeout = 10 * time.Second
)

// logCacheSize is how many of the latest log entries raft's log cache
// keeps in memory, in front of the log store: the leader sends the
// entries it has just stored to the followers from there rather than
// reading them back from the store, and a follower applies them from
// there.
const logCacheSize = 512

// Cluster is this process's node of a raft cluster: the mutex.Replicator
// of a mutex.Node, and the raft instance, log store and snapshots behind
// it. New, then mutex.NewNode with the Cluster as its Replicator, then
// Start; Close at the end.
type Cluster struct {
	cfg    Config
	log    *slog.Logger
	node   *mutex.Node
	fsm    *fsm
	raft   *raft.Raft
	store  logStore
	logs   *raft.LogCache // over store
	trans  *raft.NetworkTransport
	stream *tcpStream // trans's
	guard  *termGuard // over trans: what raft is given (transport.go)
	// raftAddr is the address the raft port listens on.
	raftAddr net.Addr
	stats    *stats  // the collector's figures (stats.go)
	batcher  batcher // the proposals that gather (propose.go)
	// addressTicks, when set before Start, paces keepAddress in place
	// of a ticker of the election timeout (tests).
	addressTicks <-chan time.Time
	// beforeRaft, when set before Start, runs in Start just before raft
	// starts, the raft port already open (tests).
	beforeRaft func()
	// recordsNoBatches, when set before Start, makes the node record
	// itself as an lcd before batch entries did (tests of an upgrade).
	recordsNoBatches bool
	// controlRead, when set before Start, runs once a control request has
	// been read, before it is answered (tests).
	controlRead func()
	// started is closed when Start returns: the raft port serves control
	// requests from its start, and answers them once raft exists.
	started chan struct{}

	ready     atomic.Bool   // the leader's restart applied in this term
	readyTerm atomic.Uint64 // the term ready was set in
	wasMember atomic.Bool   // a configuration held this node (inConfiguration)
	quit      chan struct{}
	done      chan struct{}  // the leadership loop ended
	wg        sync.WaitGroup // the other goroutines of Start
	raftDone  chan struct{}  // closed once raft has shut down (Close, or this node was removed)
	observed  chan raft.Observation
	closeOnce sync.Once
	closeErr  error

	failed   chan struct{} // closed when the node stopped applying (Failed)
	failOnce sync.Once
	failErr  error
}

// New checks cfg and returns a Cluster that has opened nothing yet.
// Errors: those of cfg.Validate.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cluster{cfg: cfg, log: log.With(slog.String(logNode, cfg.NodeID)), quit: make(chan struct{}),
		done: make(chan struct{}), raftDone: make(chan struct{}), observed: make(chan raft.Observation, 64),
		failed: make(chan struct{}), stats: newStats(), started: make(chan struct{})}, nil
}

// Start binds the raft port, opens Config.Dir (the log and stable store
// of Config.LogStore, and snapshots/), starts raft over n and, when the
// directory held no state and peers are given, bootstraps a cluster of
// them. Raft restores the latest snapshot into n before Start returns and
// applies the log after it as it learns what is committed. A Start that
// fails closes the raft port (Config.RaftListener too) and leaves
// Config.Dir as it found it: it removes what it created there (a new,
// empty store; snapshots/; the directory), never a store that was there
// before. Errors: ErrLocked, ErrOtherLogStore, or the error of the bind,
// of a file, or of raft.
func (c *Cluster) Start(n *mutex.Node) (err error) {
	defer close(c.started) // after the cleanup below, when it fails
	c.node = n
	c.fsm = newFSM(n, c.log)
	c.fsm.fatal = c.fail
	for _, p := range c.cfg.Peers {
		c.fsm.seeded[p.ID] = p
	}
	c.fsm.seeded[c.cfg.NodeID] = c.self()
	ln := c.cfg.RaftListener
	if ln == nil {
		if ln, err = net.Listen("tcp", c.cfg.RaftBind); err != nil {
			return fmt.Errorf("cluster: raft port: %w", err)
		}
	}
	// What Start created in Config.Dir, removed again when it fails.
	var created []string // directories, the deepest last
	var discard func() error
	defer func() {
		if err == nil {
			return
		}
		if c.trans == nil {
			ln.Close()
		}
		if discard != nil {
			if derr := discard(); derr != nil {
				c.log.Warn("the new raft log store not removed after the failed start", slog.Any(logError, derr))
			}
		}
		c.release()
		for i := len(created) - 1; i >= 0; i-- {
			os.Remove(created[i]) // empty ones only
		}
	}()
	snapDir := filepath.Join(c.cfg.Dir, snapshotsDir)
	for _, d := range []string{c.cfg.Dir, snapDir} {
		_, serr := os.Stat(d)
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if errors.Is(serr, os.ErrNotExist) {
			created = append(created, d)
		}
	}
	hl := newHCLogger(c.log, c.quit)
	if c.store, discard, err = openLogStore(c.cfg.LogStore, c.cfg.Dir, hl); err != nil {
		return err
	}
	if c.cfg.LogStore == LogStoreWAL {
		c.log.Warn(msgWALDefect, slog.String(logDir, c.cfg.Dir))
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(c.cfg.Dir, DefaultRetainSnapshots, hl.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("cluster: snapshots in %s: %w", c.cfg.Dir, err)
	}
	c.raftAddr = ln.Addr()
	var serverTLS *tls.Config
	if c.cfg.TLS != nil {
		serverTLS = c.cfg.TLS.Server()
	}
	c.stream = newTCPStream(ln, advertised(c.cfg.RaftAdvertise), c.dialRaft, c.serveControl, serverTLS, c.log)
	c.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: c.stream,
		Logger: hl.Named("transport"), MaxPool: transportPool, Timeout: transportTimeout})
	rc := c.raftConfig(hl)
	existing, err := raft.HasExistingState(c.store, c.store, snaps)
	if err != nil {
		return fmt.Errorf("cluster: read %s: %w", c.cfg.Dir, err)
	}
	if c.logs, err = raft.NewLogCache(logCacheSize, c.store); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if c.beforeRaft != nil {
		c.beforeRaft()
	}
	c.guard = newTermGuard(c.trans)
	c.raft, err = newRaft(rc, c.fsm, c.logs, c.store, snaps, c.guard)
	if err != nil {
		return fmt.Errorf("cluster: start raft: %w", err)
	}
	c.guard.setRaft(c.raft)
	c.raft.RegisterObserver(raft.NewObserver(c.observed, false, nil))
	c.wg.Add(1)
	go c.observe()
	c.raft.RegisterObserver(c.stats.observer)
	votes := make(chan raft.Observation, 16)
	c.raft.RegisterObserver(raft.NewObserver(votes, false, isVoteRequest))
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		votePrompts(c.raft, votes, c.quit, c.log)
	}()
	switch {
	case existing:
		c.log.Info("raft state found, rejoining the cluster", slog.String(logDir, c.cfg.Dir),
			slog.Uint64(logIndex, c.raft.LastIndex()))
	case len(c.cfg.Peers) == 0:
		c.log.Warn("no raft state and no peers: waiting to be added to a cluster", slog.String(logDir, c.cfg.Dir))
	default:
		var servers []raft.Server
		for _, p := range c.cfg.Peers {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID),
				Address: raft.ServerAddress(p.RaftAddress)})
		}
		if err := c.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil &&
			!errors.Is(err, raft.ErrCantBootstrap) {
			c.raft.Shutdown().Error()
			close(c.done) // no leadership loop runs: Close must not wait for one
			return fmt.Errorf("cluster: bootstrap: %w", err)
		}
		c.log.Info("bootstrapped a new cluster", slog.Int("peers", len(servers)))
	}
	c.inConfiguration()
	go c.watchLeadership()
	c.wg.Add(1)
	go c.keepAddress()
	return nil
}

// raftConfig returns raft's configuration from c's. Heartbeat and
// election timeouts are the election timeout; the leader's lease is half
// of it.
func (c *Cluster) raftConfig(hl hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.cfg.NodeID)
	rc.HeartbeatTimeout = c.cfg.ElectionTimeout
	rc.ElectionTimeout = c.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = c.cfg.ElectionTimeout / 2
	rc.SnapshotThreshold = c.cfg.SnapshotThreshold
	rc.SnapshotInterval = c.cfg.SnapshotInterval
	rc.TrailingLogs = c.cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.Logger = hl
	return rc
}

// release closes the transport and the store, after a failed Start or at
// Close.
func (c *Cluster) release() error {
	var errs []error
	if c.guard != nil {
		errs = append(errs, c.guard.Close())
	} else if c.trans != nil {
		errs = append(errs, c.trans.Close())
	}
	if c.store != nil {
		errs = append(errs, c.store.Close())
	}
	return errors.Join(errs...)
}

// Close hands leadership to another node when this one leads (so that a
// rolling restart costs no election timeout), stops raft, and closes the
// transport and the store. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		close(c.quit)
		if c.raft == nil {
			c.closeErr = c.release()
			return
		}
		if c.raft.State() == raft.Leader {
			if err := c.raft.LeadershipTransfer().Error(); err != nil {
				c.log.Info("leadership not handed over before stopping", slog.Any(logError, err))
			}
		}
		f := c.raft.Shutdown()
		c.stream.cutDialled() // nothing of raft's waits on a peer now (cutDialled)
		err := f.Error()
		<-c.done
		c.wg.Wait()
		c.closeErr = errors.Join(err, c.release())
	})
	return c.closeErr
}

// --- mutex.Replicator ---

// notLeader returns mutex.ErrNotLeader, with raft's reason when there is
// one.
func notLeader(err error) error {
	if err == nil {
		return mutex.ErrNotLeader
	}
	return fmt.Errorf("%w: %w", mutex.ErrNotLeader, err)
}

// await returns f's error once raft answers it. Raft leaves unanswered
// the futures it had queued when it shuts down (hashicorp/raft#498), so
// once this node is closing, or raft has shut down, await returns
// raft.ErrRaftShutdown instead; the goroutine that waits for f then waits
// on until raft answers, if ever.
func (c *Cluster) await(f raft.Future) error {
	var err error
	done := make(chan struct{})
	go func() {
		err = f.Error()
		close(done)
	}()
	if !c.answered(done) {
		return raft.ErrRaftShutdown
	}
	return err
}

// answered waits until done is closed, this node closes or raft shuts
// down, and reports whether done was closed.
func (c *Cluster) answered(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-c.quit:
	case <-c.raftDone:
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// observe follows raft's observations until Close: it notes when raft
// has shut down (this node was removed from the cluster).
func (c *Cluster) observe() {
	defer c.wg.Done()
	for {
		select {
		case o := <-c.observed:
			if st, ok := o.Data.(raft.RaftState); ok && st == raft.Shutdown {
				c.closeRaftDone()
			}
		case <-c.quit:
			return
		}
	}
}

// closeRaftDone closes raftDone once.
func (c *Cluster) closeRaftDone() {
	select {
	case <-c.raftDone:
	default:
		close(c.raftDone)
	}
}

// VerifyLeader returns nil once a quorum has confirmed that this node
// still leads, and an error wrapping mutex.ErrNotLeader otherwise.
func (c *Cluster) VerifyLeader() error {
	if c.raft == nil {
		return mutex.ErrNotLeader
	}
	if err := c.await(c.raft.VerifyLeader()); err != nil {
		return notLeader(err)
	}
	return nil
}

// Linearize returns once this node's table reflects every command
// committed before the call: it notes raft's commit index, confirms with a
// quorum that it still leads, and waits until the entries up to that index
// have applied here (the read-index recipe, with no entry written). A
// leader serves reads only once its restart applied in its term, as raft's
// commit index is known to be current only from then. Errors: wrapping
// mutex.ErrNotLeader.
func (c *Cluster) Linearize() error {
	if c.raft == nil || !c.ready.Load() {
		return mutex.ErrNotLeader
	}
	idx := c.raft.CommitIndex()
	if err := c.VerifyLeader(); err != nil {
		return err
	}
	return c.waitApplied(idx, c.cfg.ApplyTimeout)
}

// appliedRecheck is how often waitApplied looks again at raft's progress
// when no entry applies: entries the state machine never sees (raft's
// no-op and barriers) move the commit index without an apply.
const appliedRecheck = 5 * time.Millisecond

// errApplyTimeout: the entries did not apply in time.
var errApplyTimeout = errors.New("cluster: entries not applied in time")

// waitApplied waits until every entry up to idx that the state machine
// sees has applied here, for at most d.
func (c *Cluster) waitApplied(idx uint64, d time.Duration) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		next := c.fsm.changed()
		if c.appliedThrough(idx) {
			return nil
		}
		select {
		case <-next:
		case <-time.After(appliedRecheck):
		case <-deadline.C:
			return notLeader(errApplyTimeout)
		case <-c.quit:
			return notLeader(ErrClosed)
		}
	}
}

// appliedThrough reports whether every entry up to idx that the state
// machine sees has applied: the last applied is at idx or beyond, or raft
// has handed on everything up to idx and none of the entries after the
// last applied is a command.
func (c *Cluster) appliedThrough(idx uint64) bool {
	a := c.fsm.applied.Load()
	if a >= idx {
		return true
	}
	if c.raft.AppliedIndex() < idx {
		return false
	}
	for i := a + 1; i <= idx; i++ {
		var l raft.Log
		if err := c.logs.GetLog(i, &l); err != nil || l.Type == raft.LogCommand {
			return false
		}
	}
	return true
}

// Leader returns the client address of the cluster's leader, "" when none
// is known.
func (c *Cluster) Leader() string { return c.leader().ClientAddress }

// LeaderHTTP returns the HTTP address of the cluster's leader, "" when
// no leader is known or the log records no HTTP address for it.
func (c *Cluster) LeaderHTTP() string { return c.leader().HTTPAddress }

// leader returns the leader as the log records it, this node as it is
// configured (the log may still record addresses of an earlier run);
// the zero Peer when no leader is known.
func (c *Cluster) leader() Peer {
	if c.raft == nil {
		return Peer{}
	}
	_, id := c.raft.LeaderWithID()
	switch string(id) {
	case "":
		return Peer{}
	case c.cfg.NodeID:
		return c.self()
	}
	p, _ := c.fsm.member(string(id))
	return p
}

// ID returns this node's id.
func (c *Cluster) ID() string { return c.cfg.NodeID }

// LeaderID returns the id of the leader this node knows, "" for none.
func (c *Cluster) LeaderID() string { return c.leaderID() }

// HTTPAddress returns this node's HTTP address as it records it, "" when
// it has no HTTP API.
func (c *Cluster) HTTPAddress() string { return c.cfg.HTTPAddress }

// self returns this node as it records itself in the log.
func (c *Cluster) self() Peer {
	return Peer{ID: c.cfg.NodeID, RaftAddress: c.cfg.RaftAdvertise, ClientAddress: c.cfg.ClientAddress, HTTPAddress: c.cfg.HTTPAddress,
		Batches: !c.recordsNoBatches}
}

// --- leadership ---

// watchLeadership follows raft's leadership of this node and tells the
// node: SetLeader(true) once the log before this term has applied here
// (a barrier), SetLeader(false) as soon as the leadership is lost, and
// both when it was lost and won again unseen (the term changed).
func (c *Cluster) watchLeadership() {
	defer close(c.done)
	leading := false
	var term uint64
	for {
		select {
		case <-c.raft.LeaderCh():
		case <-c.quit:
			if leading {
				c.stepDown()
			}
			return
		}
		isLeader, now := c.raft.State() == raft.Leader, c.raft.CurrentTerm()
		if leading && (!isLeader || now != term) {
			c.stepDown()
			leading = false
		}
		if !leading && isLeader {
			term = now
			leading = c.takeOver(term)
		}
	}
}

// takeOver makes this node's Node the leader of term and reports whether
// it did: it waits for a barrier (every entry of earlier terms applied
// here), then SetLeader(true), then records this node's client address in
// the log when the log has another or none.
func (c *Cluster) takeOver(term uint64) bool {
	for {
		err := c.await(c.raft.Barrier(c.cfg.ApplyTimeout))
		if err == nil {
			break
		}
		if c.raft.State() != raft.Leader || c.raft.CurrentTerm() != term {
			return false
		}
		select {
		case <-c.quit:
			return false
		case <-time.After(c.cfg.ElectionTimeout / 10):
		}
	}
	c.node.SetLeader(true)
	c.readyTerm.Store(term)
	c.ready.Store(true)
	c.log.Info("leading the cluster", slog.Uint64(logTerm, term), slog.Uint64(logIndex, c.raft.LastIndex()))
	c.recordMembers()
	if c.cfg.OnLeader != nil {
		c.cfg.OnLeader(true)
	}
	return true
}

// stepDown tells the node it no longer leads.
func (c *Cluster) stepDown() {
	c.ready.Store(false)
	c.node.SetLeader(false)
	c.log.Info("no longer leading the cluster", slog.String(logLeader, c.Leader()))
	if c.cfg.OnLeader != nil {
		c.cfg.OnLeader(false)
	}
}

// recordMembers writes a member entry for this node when the log records
// other addresses for it, and for each peer of the bootstrap configuration
// that the log records none for.
func (c *Cluster) recordMembers() {
	want := []Peer{c.self()}
	for _, p := range c.cfg.Peers {
		if p.ID != c.cfg.NodeID {
			want = append(want, p)
		}
	}
	var futures []raft.ApplyFuture
	for i, p := range want {
		if r, ok := c.fsm.logged(p.ID); ok && (i > 0 || r == p) {
			continue
		}
		futures = append(futures, c.raft.Apply(memberEntry(p), c.cfg.ApplyTimeout))
	}
	for _, f := range futures {
		if err := c.await(f); err != nil {
			c.log.Warn("member not recorded", slog.Any(logError, err))
		}
	}
}

// --- status ---

// Status is what a node reports of itself and its cluster.
type Status struct {
	ID       string `json:"id"`
	State    string `json:"state"`     // Leader, Follower, Candidate or Shutdown
	Ready    bool   `json:"ready"`     // a leader whose restart applied: it serves (see leads)
	Leader   string `json:"leader"`    // the leader's client address; "" when none is known
	LeaderID string `json:"leader_id"` // the leader's node id
	// LeaderHTTP is the leader's HTTP address as the log records it; ""
	// when none is known.
	LeaderHTTP string `json:"leader_http,omitempty"`
	Term       uint64 `json:"term"`
	// LastIndex is the last entry in this node's log; CommitIndex the last
	// it knows committed; AppliedIndex the last applied to its table.
	LastIndex    uint64 `json:"last_index"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// Members are the servers of the configuration, with the addresses
	// the log records (this node's own as it is configured). Status asks
	// none of them: only this node's own entry is Reachable, with its
	// state, last contact and applied position. Report asks each.
	Members []Member `json:"members"`
	// Digest is the SHA-256 of the table's snapshot records at
	// AppliedIndex, when asked for: two nodes at one applied index with
	// one digest hold the same table.
	Digest string `json:"digest,omitempty"`
	Keys   int    `json:"keys"`
}

// leads reports, without asking the other nodes, whether this node leads
// and serves: raft says it leads, in the term whose restart it applied,
// and names itself the leader. The flag alone lags raft by the time
// watchLeadership takes to hear of a change.
func (c *Cluster) leads() bool {
	if !c.ready.Load() || c.raft.State() != raft.Leader || c.raft.CurrentTerm() != c.readyTerm.Load() {
		return false
	}
	_, id := c.raft.LeaderWithID()
	return string(id) == c.cfg.NodeID
}

// Ready reports whether this node leads and serves, confirmed with a
// quorum (VerifyLeader): a leader that was paused or cut off, and has not
// yet heard that another node leads in a later term, is not ready though
// it still believes it leads. It waits at most for raft's leader lease
// (half the election timeout) when no quorum answers.
func (c *Cluster) Ready() bool { return c.leads() && c.VerifyLeader() == nil && c.leads() }

// Status returns this node's view of the cluster; with digest, the table's
// digest too, which costs a copy of the table.
func (c *Cluster) Status(digest bool) Status {
	_, id := c.raft.LeaderWithID()
	st := Status{ID: c.cfg.NodeID, State: c.raft.State().String(), Ready: c.leads(), Leader: c.Leader(), LeaderHTTP: c.LeaderHTTP(),
		LeaderID: string(id), Term: c.raft.CurrentTerm(), LastIndex: c.raft.LastIndex(),
		CommitIndex: c.raft.CommitIndex(), Members: c.knownMembers()}
	if !digest {
		st.AppliedIndex = c.fsm.applied.Load()
		st.Keys = c.node.Len()
		return st
	}
	c.fsm.mu.Lock()
	st.AppliedIndex = c.fsm.applied.Load()
	t := c.node.Clone()
	c.fsm.mu.Unlock()
	st.Keys = t.Len()
	st.Digest = TableDigest(t)
	return st
}

// Report is Status with each member as it says of itself when it
// answers within ctx and one election timeout (see Members): whether it
// is reachable, its state, its last contact with a leader and its
// applied position. A member that does not answer in that time (a frozen
// process, a black-holed host) is listed unreachable, so that Report
// stays quick when it matters most. When this node has no
// configuration, the members are Status's.
// Its Ready is confirmed with a quorum (Ready).
func (c *Cluster) Report(ctx context.Context, digest bool) Status {
	st := c.Status(digest)
	st.Ready = st.Ready && c.Ready()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ElectionTimeout)
	defer cancel()
	if ms, err := c.Members(ctx); err == nil {
		st.Members = ms
	}
	return st
}

// knownMembers returns the servers of the configuration with the
// addresses the log records, without asking them.
func (c *Cluster) knownMembers() []Member {
	servers, _ := c.configuration()
	leader := c.leaderID()
	out := make([]Member, 0, len(servers))
	for _, s := range servers {
		m := c.newMember(s, leader)
		if m.ID == c.cfg.NodeID {
			m.fill(c.nodeStatus())
		}
		out = append(out, m)
	}
	sortMembers(out)
	return out
}

// TableDigest returns the hex SHA-256 of t's snapshot records.
func TableDigest(t *mutex.Table) string {
	h := sha256.New()
	store.WriteSnapshot(h, t)
	return hex.EncodeToString(h.Sum(nil))
}

// dialAddress returns the address to dial for the raft address addr: the
// Config.Dial address of the node that has it, or addr.
func (c *Cluster) dialAddress(addr raft.ServerAddress) string {
	if len(c.cfg.Dial) > 0 {
		for _, p := range c.fsm.memberList(true) {
			if p.RaftAddress == string(addr) {
				if d, ok := c.cfg.Dial[p.ID]; ok {
					return d
				}
			}
		}
	}
	return string(addr)
}

// dialRaft dials the raft port of the node whose raft address is addr, at
// its Config.Dial address when it has one; with Config.TLS, under TLS,
// and the node's certificate must name addr's host (not the host of the
// address dialled, which may be a tunnel's). ctx bounds the dial and the
// handshake.
func (c *Cluster) dialRaft(ctx context.Context, addr raft.ServerAddress) (net.Conn, error) {
	return c.dialNode(ctx, c.dialAddress(addr), string(addr), false)
}

// dialNode dials addr; with Config.TLS, under TLS, and the other side's
// certificate must name the host of name, the address it is known by: a
// raft port's must be signed by the nodes' CAs (PeerTLS.Client), the
// leader's mutex port's by them or a system root (PeerTLS.Leader, with
// mutexPort). ctx bounds the dial and the handshake.
func (c *Cluster) dialNode(ctx context.Context, addr, name string, mutexPort bool) (net.Conn, error) {
	var d net.Dialer
	if c.cfg.TLS == nil {
		return d.DialContext(ctx, "tcp", addr)
	}
	host, _, err := net.SplitHostPort(name)
	if err != nil {
		return nil, err
	}
	td := tls.Dialer{NetDialer: &d}
	if mutexPort {
		td.Config = c.cfg.TLS.Leader(host)
	} else {
		td.Config = c.cfg.TLS.Client(host)
	}
	return td.DialContext(ctx, "tcp", addr)
}

// RaftAddr returns the address the raft port listens on, once Start has
// bound it.
func (c *Cluster) RaftAddr() net.Addr { return c.raftAddr }

// fail records why the node stopped applying entries and closes failed.
func (c *Cluster) fail(err error) {
	c.failOnce.Do(func() {
		c.failErr = err
		close(c.failed)
	})
}

// Failed is closed once this node met an entry of its log that does not
// decode and stopped applying entries; Err then says why. Its owner must
// stop the node (Close): its table no longer follows the log.
func (c *Cluster) Failed() <-chan struct{} { return c.failed }

// Err returns why Failed is closed, or nil.
func (c *Cluster) Err() error {
	select {
	case <-c.failed:
		return c.failErr
	default:
		return nil
	}
}

// msgWALDefect is the warning of a node on the WAL store: raft-wal
// v0.4.0 cannot read back, after a restart, a log whose tail raft cut
// (hashicorp/raft-wal issue #31; docs/ha.md, Raft log store).
const msgWALDefect = "RAFT_LOG_STORE=wal: raft-wal v0.4.0 cannot read back, after a restart, a log whose tail raft cut " +
	"(upstream issue #31, fixed in no release yet); run production clusters on boltdb (docs/ha.md)"

// ErrDamagedLog: the raft log in Config.Dir cannot be read back (Start).
var ErrDamagedLog = errors.New("the raft log cannot be read back")

// newRaft is raft.NewRaft, which panics when the log store cannot read
// back the entries it lists (a damaged log): that is returned as an
// error wrapping ErrDamagedLog.
func newRaft(rc *raft.Config, fsm raft.FSM, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore,
	trans raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("%w: %v", ErrDamagedLog, p)
		}
	}()
	return raft.NewRaft(rc, fsm, logs, stable, snaps, trans)
}
