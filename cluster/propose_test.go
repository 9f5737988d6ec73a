package cluster

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/locking-center/locking-center/mutex"
)

// Commands proposed back to back, without waiting, share entries once
// earlier ones are in flight, and apply on every node in the order they
// were proposed: the grants' tokens rise with it.
func TestProposalsShareEntries(t *testing.T) {
	nodes := newTestCluster(t, 3)
	lead := awaitLeader(t, nodes)
	eventually(t, "every node recorded that it reads batches", lead.c.batchesRead)
	first := lead.c.raft.LastIndex()
	const n = 200
	proposeMany(t, lead, "k", n)
	converge(t, lead, nodes)
	var last uint64
	for _, h := range lead.n.Snapshot().Holders { // in key order
		if h.Token <= last {
			t.Fatalf("%s holds token %#x after %#x: applied out of order", h.Key, h.Token, last)
		}
		last = h.Token
	}
	entries, commands := 0, 0
	for i := first + 1; i <= lead.c.raft.LastIndex(); i++ {
		var l raft.Log
		if err := lead.c.logs.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		e, err := decodeEntry(l.Data)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		switch e.kind {
		case entryBatch:
			entries++
			commands += len(e.cmds)
		case entryCommand:
			entries++
			commands++
		}
	}
	if commands != n || entries >= n {
		t.Fatalf("%d commands in %d entries, want %d in fewer", commands, entries, n)
	}
	t.Logf("%d commands in %d entries", commands, entries)
}

// A batch begun in an earlier term is refused, not written: its commands
// were proposed by the leader of that term. One that still gathers when a
// command of this term comes is refused then, and the new command goes
// in a batch of its own (a new term's restart must not go with it).
func TestStaleBatchRefused(t *testing.T) {
	nodes := newTestCluster(t, 3)
	lead := awaitLeader(t, nodes)
	c := lead.c
	stale := func(key string) *batch {
		b := &batch{term: c.raft.CurrentTerm() - 1, done: make(chan struct{})}
		cmd := mutex.Command{Op: mutex.OpAcquire, At: time.Now(), Key: key, Source: "v1"}
		b.data = appendCommandEntry(nil, &cmd)
		b.ends = []int{len(b.data)}
		return b
	}
	before := c.raft.LastIndex()
	b := stale("flushed")
	c.batcher.mu.Lock()
	c.batcher.next = b
	c.flushLocked()
	c.batcher.mu.Unlock()
	if err := c.awaitBatch(b); !errors.Is(err, raft.ErrLeadershipLost) {
		t.Fatalf("stale batch: %v", err)
	}
	if got := c.raft.LastIndex(); got != before {
		t.Fatalf("the log grew from %d to %d", before, got)
	}

	b = stale("gathering")
	c.batcher.mu.Lock()
	c.batcher.next = b
	c.batcher.mu.Unlock()
	cmd := mutex.Command{Op: mutex.OpAcquire, At: time.Now(), Key: "now", Source: "v1"}
	if err := c.Propose(&cmd)(); err != nil {
		t.Fatalf("a command of this term: %v", err)
	}
	if err := c.awaitBatch(b); !errors.Is(err, raft.ErrLeadershipLost) {
		t.Fatalf("the stale batch that gathered: %v", err)
	}
	if _, ok := lead.n.Holder("now"); !ok {
		t.Fatal("the command of this term did not apply")
	}
	if _, ok := lead.n.Holder("gathering"); ok {
		t.Fatal("the stale command applied")
	}
}

// logKinds returns how many entries of each kind the leader's log holds
// after position from.
func logKinds(t *testing.T, c *Cluster, from uint64) map[byte]int {
	t.Helper()
	kinds := map[byte]int{}
	for i := from + 1; i <= c.raft.LastIndex(); i++ {
		var l raft.Log
		if err := c.logs.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == raft.LogCommand && len(l.Data) > 0 {
			kinds[l.Data[0]]++
		}
	}
	return kinds
}

// proposeMany proposes n acquires back to back at lead and waits for all.
func proposeMany(t *testing.T, lead *testNode, prefix string, n int) {
	t.Helper()
	waits := make([]func() error, n)
	for i := range waits {
		cmd := mutex.Command{Op: mutex.OpAcquire, At: time.Now(), Key: fmt.Sprintf("%s%03d", prefix, i), Source: "v1"}
		waits[i] = lead.c.Propose(&cmd)
	}
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("proposal %s%d: %v", prefix, i, err)
		}
	}
}

// While a member records itself as an lcd before batch entries, the
// leader writes every command in an entry of its own; once that member
// runs this lcd (here: it restarts recording that it reads them), the
// leader batches.
func TestNoBatchesUntilEveryMemberReadsThem(t *testing.T) {
	old := "n3"
	nodes := newTestClusterWith(t, 3, testLogStore(t), func(tn *testNode) {
		if tn.id == old {
			tn.setup = func(c *Cluster) { c.recordsNoBatches = true }
		}
	})
	lead := awaitLeader(t, nodes)
	if lead.id == old { // the test is of the others' leader
		if err := lead.c.raft.LeadershipTransfer().Error(); err != nil {
			t.Fatal(err)
		}
		eventually(t, "another leader", func() bool { lead = awaitLeader(t, nodes); return lead.id != old })
	}
	eventually(t, "the others record that they read batches, n3 that it does not", func() bool {
		for _, tn := range nodes {
			if p, ok := lead.c.fsm.logged(tn.id); !ok || p.Batches != (tn.id != old) {
				return false
			}
		}
		return true
	})
	first := lead.c.raft.LastIndex()
	proposeMany(t, lead, "before", 100)
	if k := logKinds(t, lead.c, first); k[entryBatch] != 0 || k[entryCommand] != 100 {
		t.Fatalf("with a member that reads no batches: entries by kind %v", k)
	}
	for _, tn := range nodes {
		if tn.id == old {
			tn.setup = nil
			tn.restart(t)
		}
	}
	lead = awaitLeader(t, nodes)
	eventually(t, "every node recorded that it reads batches", lead.c.batchesRead)
	first = lead.c.raft.LastIndex()
	proposeMany(t, lead, "after", 100)
	if k := logKinds(t, lead.c, first); k[entryBatch] == 0 {
		t.Fatalf("after the upgrade: entries by kind %v", k)
	}
	converge(t, lead, nodes)
}
