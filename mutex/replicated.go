package mutex

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"time"
)

// ErrNotLeader: a replicated node that is not its cluster's leader was
// asked to change the table.
var ErrNotLeader = errors.New("mutex: not the leader")

// TokenShift places a replicated table's fencing tokens: before the entry
// at position i of the log applies, the token counter is raised to
// i << TokenShift, so a grant's token is its entry's position times 65,536
// plus its rank among the grants that entry made. Tokens therefore grow
// with the log, across elections.
const TokenShift = 16

// Replicator is a log replicated among the nodes of a cluster (raft): it
// commits commands before any node applies them. A node with a Replicator
// proposes every command to it, and the log calls ApplyCommitted on every
// node, in log order, with each committed command.
type Replicator interface {
	// Propose submits c to the log and returns without waiting; wait
	// reports when c has been committed and applied on this node, or why
	// it was not (ErrNotLeader, or the log's error).
	Propose(c *Command) (wait func() error)
	// VerifyLeader returns nil when this node is still the leader, as a
	// quorum confirms it; the node asks before it proposes an expiry.
	VerifyLeader() error
	// Linearize returns once this node has applied every command
	// committed before the call (the read-index recipe: note the commit
	// position, confirm leadership, wait until it is applied), or an error
	// when it cannot (ErrNotLeader).
	Linearize() error
	// Leader returns the client address of the cluster's leader, "" when
	// there is none.
	Leader() string
}

// proposal is a command this node proposed, waiting for its entry to be
// applied here.
type proposal struct {
	waker   Waker       // registered for a parked acquire as it applies
	gone    func() bool // registered with waker, unless nil (ApplyWatched)
	route   Route       // an open session's route, attached as it applies
	remote  string      // the open session's connection
	session bool        // deliver the result to the session's route
	done    chan struct{}
	res     Result
}

// Replicated reports whether the node commits through a replicated log.
// Front ends then expect a command to take a round trip to a quorum.
func (n *Node) Replicated() bool { return n.rep != nil }

// Leader returns the client address of the cluster's leader for a
// replicated node ("" when none is known), and "" for a single node.
func (n *Node) Leader() string {
	if n.rep == nil {
		return ""
	}
	return n.rep.Leader()
}

// Removed reports whether this node was removed from its cluster, when
// its Replicator can tell (it has a method Removed() bool, as
// cluster.Cluster does); false for a single node.
func (n *Node) Removed() bool {
	r, ok := n.rep.(interface{ Removed() bool })
	return ok && r.Removed()
}

// Linearize returns once a read of this node reflects every command
// committed before the call: at once for a single node; for a replicated
// one, ErrNotLeader when it is not the leader.
func (n *Node) Linearize() error {
	if n.rep == nil {
		return nil
	}
	return n.rep.Linearize()
}

// instanceID returns a random id that tells this node's proposals apart.
func instanceID() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) | 1
}

// propose stamps c with the node's clock, proposes the expiries due first
// and then c, waits for c to apply here and returns its result;
// StatusUnavailable when this node is not the leader or c was not
// committed.
func (n *Node) propose(c Command, pr *proposal) Result {
	n.pmu.Lock()
	n.mu.Lock()
	if !n.leader || n.closed {
		n.mu.Unlock()
		n.pmu.Unlock()
		return Result{Status: StatusUnavailable}
	}
	now := n.now()
	c.At = now
	n.stamp(&c)
	due := n.takeDue(now.UnixNano())
	gone := n.goneBefore(due, &c)
	n.register(&c, pr)
	n.mu.Unlock()
	waits := n.proposeCancels(gone, now)
	waits = append(waits, n.proposeExpiries(due, now)...)
	wait := n.rep.Propose(&c)
	n.pmu.Unlock()
	for _, w := range waits {
		w()
	}
	return n.await(&c, pr, wait)
}

// proposeCancels proposes the withdrawal of each parked request of
// tickets (see goneAhead): the cancels go to the log before the commands
// that would have granted those requests. n.pmu is held.
func (n *Node) proposeCancels(tickets []uint64, now time.Time) []func() error {
	var waits []func() error
	for _, ticket := range tickets {
		waits = append(waits, n.rep.Propose(cancelOf(ticket, now)))
	}
	return waits
}

// register names c as this node's next proposal and records pr to hear
// of its result. n.mu is held.
func (n *Node) register(c *Command, pr *proposal) {
	pr.done = make(chan struct{})
	n.nextProposal++
	c.Proposer, c.Proposal = n.instance, n.nextProposal
	n.proposals[c.Proposal] = pr
}

// await waits for the proposal c, registered with pr, to apply here and
// returns its result; StatusUnavailable when the log failed it.
func (n *Node) await(c *Command, pr *proposal, wait func() error) Result {
	err := wait()
	select {
	case <-pr.done:
		return pr.res // applied, whatever the wait says now
	default:
	}
	if err == nil {
		<-pr.done
		return pr.res
	}
	n.mu.Lock()
	delete(n.proposals, c.Proposal)
	n.mu.Unlock()
	select {
	case <-pr.done:
		return pr.res
	default:
	}
	return Result{Status: StatusUnavailable}
}

// takeDue returns the sessions whose TTL has passed at now and marks them
// as being expired, so that they are proposed once. n.mu is held.
func (n *Node) takeDue(now int64) []uint64 {
	var due []uint64
	for len(n.expiry) > 0 && n.expiry[0].deadline <= now {
		l := n.expiry[0]
		if at := l.lastSeen.Load() + l.ttl; at > now {
			l.deadline = at
			n.expiryDown(0)
			continue
		}
		due = append(due, l.id)
		n.popExpiry() // it stays live until its expiry applies
	}
	return due
}

// proposeExpiries proposes the expiry of each session of due, once this
// node has confirmed that it is still the leader: a leader that stalled and
// lost its term must not end sessions that the new leader keeps alive.
// n.pmu is held.
func (n *Node) proposeExpiries(due []uint64, now time.Time) []func() error {
	if len(due) == 0 {
		return nil
	}
	if err := n.rep.VerifyLeader(); err != nil {
		return nil
	}
	waits := make([]func() error, 0, len(due))
	for _, id := range due {
		waits = append(waits, n.rep.Propose(&Command{Op: OpExpireSession, At: now, Session: id}))
	}
	return waits
}

// ApplyCommitted applies c, a command committed at position index of the
// replicated log, on this node. The log calls it on every node, one
// command at a time, in log order. The command's proposer, if this node,
// gets its result; wakers and routes are served as for a single node.
func (n *Node) ApplyCommitted(c *Command, index uint64) Result {
	var d deliveries
	n.mu.Lock()
	pr, res := n.applyCommitted(c, index, &d)
	n.endApply(&d, answer{pr, res})
	return res
}

// ApplyCommittedBatch applies cmds, the commands of one entry committed
// at position index, in their order, as ApplyCommitted applies each, in
// one step: no observer registers, and no reader looks, between two of
// them, so every node's observers see all of an entry's events or none.
func (n *Node) ApplyCommittedBatch(cmds []Command, index uint64) {
	var d deliveries
	var answers []answer
	n.mu.Lock()
	for i := range cmds {
		if pr, res := n.applyCommitted(&cmds[i], index, &d); pr != nil {
			answers = append(answers, answer{pr, res})
		}
	}
	n.endApply(&d, answers...)
}

// answer is the result owed to this node's proposal of a command applied.
type answer struct {
	pr  *proposal // nil: not this node's
	res Result
}

// endApply ends an apply begun with n.mu held: it arms a leader's timer,
// releases n.mu, then answers the proposals and runs d.
func (n *Node) endApply(d *deliveries, answers ...answer) {
	if n.leader {
		n.arm(n.now().UnixNano())
	}
	n.mu.Unlock()
	for _, a := range answers {
		if a.pr != nil {
			a.pr.res = a.res
			close(a.pr.done)
		}
	}
	d.run()
}

// applyCommitted applies c at position index and returns its result and
// this node's proposal of it, if any, which the caller answers once n.mu
// is released. n.mu is held.
func (n *Node) applyCommitted(c *Command, index uint64, d *deliveries) (*proposal, Result) {
	c.Floor = max(c.Floor, index<<TokenShift)
	var pr *proposal
	if c.Proposer == n.instance && c.Proposal != 0 {
		pr = n.proposals[c.Proposal]
		delete(n.proposals, c.Proposal)
	}
	l := n.lives[c.Session]
	n.position = index
	res, _ := n.applyOne(c, d) // the leader withdrew the departed as it proposed
	n.position = 0
	if pr == nil {
		return nil, res
	}
	switch {
	case res.Status != StatusParked || pr.waker == nil:
	case n.leader:
		n.watch(res.Ticket, pr.waker, pr.gone)
	default:
		// Proposed before this node stepped down, applied after: it is
		// withdrawn here as SetLeader(false) withdrew the others, or
		// nothing would ever wake it (a node removed from its cluster
		// applies nothing more). The next leader's restart withdraws it
		// from the table.
		d.wakes = append(d.wakes, wake{pr.waker, Event{Kind: EventWithdrawn, Reason: ReasonRestart, Ticket: res.Ticket}, nil})
	}
	if c.Op == OpOpenSession && res.Status == StatusOK {
		if nl := n.lives[res.Session]; nl != nil {
			nl.route, nl.remote = pr.route, pr.remote
		}
	}
	if pr.session && l != nil {
		n.deliver(l, Output{Command: *c, Result: res}, d)
	}
	return pr, res
}

// SetLeader tells a replicated node whether it is its cluster's leader.
// A new leader gives every session a fresh TTL from now (no session
// expires early through a failover), starts its timers, and proposes a
// restart of the table before any other command: requests that waited on
// the old leader's connections are withdrawn, and leases and lock-delays
// start again from now. SetLeader(true) returns once the restart applied
// here, or the log failed it. A node that is no longer the leader stops
// its timers and tells the Waker of every parked request of its own
// connections that it was withdrawn (EventWithdrawn, ReasonRestart): the
// new leader's restart withdraws them from the table, and their clients
// ask again there. Its pending proposals fail as the log fails them.
func (n *Node) SetLeader(leader bool) {
	if !leader {
		var d deliveries
		// n.pmu first: a proposal that passed its leadership check has been
		// handed to the log before SetLeader(false) returns, so none of this
		// term reaches the log after a later term's restart. (A cluster's
		// log takes proposals in batches: it hands them on in the order
		// they were proposed, and refuses a batch begun in an earlier
		// term than its own.)
		n.pmu.Lock()
		n.mu.Lock()
		n.leader = false
		if n.timer != nil {
			n.timer.Stop()
		}
		n.armed = 0
		for ticket, w := range n.wakers {
			d.wakes = append(d.wakes, wake{w, Event{Kind: EventWithdrawn, Reason: ReasonRestart, Ticket: ticket}, nil})
		}
		clear(n.wakers)
		clear(n.probes)
		n.mu.Unlock()
		n.pmu.Unlock()
		d.run()
		return
	}
	// n.pmu first: no proposal of the new term goes before the restart.
	n.pmu.Lock()
	n.mu.Lock()
	if n.leader || n.closed {
		n.mu.Unlock()
		n.pmu.Unlock()
		return
	}
	n.leader = true
	now := n.now()
	clear(n.lives)
	n.expiry = n.expiry[:0]
	for _, id := range n.t.sessionIDs() {
		n.addLive(id, time.Duration(n.t.sessions[id].ttl), now.UnixNano())
	}
	c := Command{Op: OpRestart, At: now}
	pr := &proposal{}
	n.register(&c, pr)
	n.mu.Unlock()
	wait := n.rep.Propose(&c)
	n.pmu.Unlock()
	n.await(&c, pr, wait)
}

// IsLeader reports whether the node changes its table now: always for a
// single node; for a replicated one, between SetLeader(true) and
// SetLeader(false).
func (n *Node) IsLeader() bool {
	if n.rep == nil {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leader
}

// Replace puts t in place of the node's table, as a replicated log does
// when it restores a snapshot. Every session's liveness starts again from
// now; waiting requests of this node's connections are no longer waited
// for.
func (n *Node) Replace(t *Table) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.replaced.Add(1)
	n.t = t
	clear(n.wakers)
	clear(n.probes)
	clear(n.lives)
	n.expiry = n.expiry[:0]
	now := n.now().UnixNano()
	for _, id := range n.t.sessionIDs() {
		n.addLive(id, time.Duration(n.t.sessions[id].ttl), now)
	}
}

// Replaced returns how many tables Replace has put in place: an observer
// that sees it change knows that the events of the entries the new table
// took in were never made here. It may be called from an observer.
func (n *Node) Replaced() uint64 { return n.replaced.Load() }

// fireReplicated is the timer of a replicated leader: it proposes the
// expiries due and, when a deadline of the table is due, a tick.
func (n *Node) fireReplicated() {
	n.pmu.Lock()
	n.mu.Lock()
	if n.closed || !n.leader {
		n.mu.Unlock()
		n.pmu.Unlock()
		return
	}
	n.armed = 0
	now := n.now()
	ns := now.UnixNano()
	due := n.takeDue(ns)
	tick := Command{Op: OpTick, At: now}
	ticks := false
	if at, ok := n.t.NextDeadline(); ok && at.UnixNano() <= ns {
		ticks = true
	}
	gone := n.goneBefore(due, &tick) // a tick with nothing due passes nothing on
	n.mu.Unlock()
	waits := n.proposeCancels(gone, now)
	waits = append(waits, n.proposeExpiries(due, now)...)
	if ticks {
		waits = append(waits, n.rep.Propose(&tick))
	}
	n.pmu.Unlock()
	for _, w := range waits {
		w()
	}
	n.mu.Lock()
	n.arm(n.now().UnixNano())
	n.mu.Unlock()
}
