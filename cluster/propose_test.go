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
	waits := make([]func() error, n)
	now := time.Now()
	for i := range waits {
		cmd := mutex.Command{Op: mutex.OpAcquire, At: now, Key: fmt.Sprintf("k%03d", i), Source: "v1"}
		waits[i] = lead.c.Propose(&cmd)
	}
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
	}
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
