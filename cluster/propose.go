package cluster

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/locking-center/locking-center/mutex"
)

// Group commit of proposals. Each command a leader proposes becomes part
// of a batch; a batch is handed to raft as one entry as soon as fewer
// than maxInFlight batches of this node wait for their commit, and
// otherwise when one of them has committed (or failed). A lone command
// therefore goes to raft at once, in an entry of its own (kind 1, as
// lcd has always written), and under load the commands that arrive
// while earlier ones commit share an entry (kind 4, see doc.go): raft's
// cost per entry (its future, the log store's record, the replication
// messages' encoding, the state machine's dispatch on every node) is
// paid once for all of them. Batches go to raft in the order their
// commands were proposed, and each command keeps its place in its batch,
// so the log holds the commands in the order Propose was called.
//
// An lcd before batch entries cannot read them (it stops at the first,
// as at a damaged entry), so a leader gathers commands only while the
// log records of every member of the configuration that it reads them
// (Peer.Batches, which each node records of itself); until then every
// command has an entry of its own. A cluster upgraded one node at a time
// starts batching once its last node runs this lcd.

// Bounds of a batch.
const (
	// maxInFlight is how many of this node's batches may wait for their
	// commit before the next one waits too. Two keep raft's pipeline fed
	// (one entry replicating, one queued) while the rest gather.
	maxInFlight = 2
	// maxBatchCommands and maxBatchBytes bound one batch entry: a batch
	// that reaches either goes to raft at once, whatever is in flight.
	// Raft keeps and snapshots its log by the count of entries
	// (SnapshotThreshold, TrailingLogs), so the bounds also bound what a
	// batch adds to the log a node keeps and replays: at most 16 KiB an
	// entry where a lone command takes about 200 bytes.
	maxBatchCommands = 64
	maxBatchBytes    = 16 << 10
)

// batch is commands proposed together: their entries, one after the
// other, and the ends of each.
type batch struct {
	data []byte
	ends []int
	term uint64 // raft's term when the batch began
	// shared: it may take more than one command (batchesRead held when it
	// began).
	shared bool
	done   chan struct{} // closed once raft answered the batch's entry
	err    error         // raft's answer, once done
}

// full reports whether b takes no more commands.
func (b *batch) full() bool {
	return len(b.ends) >= maxBatchCommands || len(b.data) >= maxBatchBytes
}

// entry returns b's entry for raft: its one command's entry, or a batch
// entry of all of them.
func (b *batch) entry() []byte {
	if len(b.ends) == 1 {
		return b.data
	}
	out := make([]byte, 0, len(b.data)+1+binary.MaxVarintLen32*(1+len(b.ends)))
	out = append(out, entryBatch)
	out = binary.AppendUvarint(out, uint64(len(b.ends)))
	start := 0
	for _, end := range b.ends {
		out = binary.AppendUvarint(out, uint64(end-start))
		start = end
	}
	return append(out, b.data...)
}

// batcher gathers this node's proposals into batches (see above).
type batcher struct {
	mu       sync.Mutex
	inFlight int
	next     *batch // gathering; nil when none
}

// Propose appends c to the raft log. The wait returns once c has been
// committed and applied here, or with an error wrapping
// mutex.ErrNotLeader (this node does not lead, lost its leadership before
// c committed, or is shutting down).
func (c *Cluster) Propose(cmd *mutex.Command) (wait func() error) {
	if c.raft == nil {
		return func() error { return mutex.ErrNotLeader }
	}
	start := time.Now()
	b := c.add(cmd)
	return func() error {
		if err := c.awaitBatch(b); err != nil {
			return notLeader(err)
		}
		c.stats.observeApply(start)
		return nil
	}
}

// add puts cmd into the batch that gathers, and hands that batch to raft
// when it may go.
func (c *Cluster) add(cmd *mutex.Command) *batch {
	p := &c.batcher
	p.mu.Lock()
	defer p.mu.Unlock()
	term := c.raft.CurrentTerm()
	b := p.next
	if b != nil && b.term != term {
		// Begun by the leader of an earlier term: refused now, so that
		// this term's commands (its restart first) start a batch of their
		// own.
		c.flushLocked()
		b = nil
	}
	if b == nil {
		b = &batch{data: make([]byte, 0, entryCap), term: term, done: make(chan struct{})}
		b.shared = p.inFlight >= maxInFlight && c.batchesRead()
		p.next = b
	}
	b.data = appendCommandEntry(b.data, cmd)
	b.ends = append(b.ends, len(b.data))
	// A batch that gathers has maxInFlight ahead of it: finish hands it
	// on as soon as one of them is answered.
	if !b.shared || b.full() {
		c.flushLocked()
	}
	return b
}

// flushLocked hands the gathering batch to raft. c.batcher.mu is held, so
// batches reach raft in the order they began. A batch begun in an
// earlier term than raft's now is not handed on: its commands were
// proposed by a leader of that term, and a later term of this node
// starts with a restart that none of them may follow.
func (c *Cluster) flushLocked() {
	p := &c.batcher
	b := p.next
	p.next = nil
	if b.term != c.raft.CurrentTerm() {
		b.err = raft.ErrLeadershipLost
		close(b.done)
		return
	}
	p.inFlight++
	c.stats.proposedCommands.Add(uint64(len(b.ends)))
	c.stats.proposedEntries.Add(1)
	f := c.raft.Apply(b.entry(), c.cfg.ApplyTimeout)
	go c.finish(b, f)
}

// batchesRead reports whether the log records of every server of raft's
// latest configuration that it reads batch entries.
func (c *Cluster) batchesRead() bool {
	f := c.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if p, ok := c.fsm.logged(string(s.ID)); !ok || !p.Batches {
			return false
		}
	}
	return true
}

// finish waits for raft's answer to b's entry, tells b's proposers, then
// lets the next batch go.
func (c *Cluster) finish(b *batch, f raft.Future) {
	b.err = f.Error()
	close(b.done)
	p := &c.batcher
	p.mu.Lock()
	p.inFlight--
	if p.next != nil {
		c.flushLocked()
	}
	p.mu.Unlock()
}

// awaitBatch returns b's error once raft answers it. Raft leaves
// unanswered the entries it had queued when it shuts down
// (hashicorp/raft#498), so once this node is closing, or raft has shut
// down, awaitBatch returns raft.ErrRaftShutdown instead.
func (c *Cluster) awaitBatch(b *batch) error {
	if !c.answered(b.done) {
		return raft.ErrRaftShutdown
	}
	return b.err
}
