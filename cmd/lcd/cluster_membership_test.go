package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/manager"
)

// Under the load of 16 clients: a fourth node, started waiting, is added
// through a follower's management port and catches up; the leader is
// removed; then each of the three left is stopped with SIGTERM and
// started again, one after another. No answered grant is lost, tokens
// only grow, no two clients are ever in one key's critical section, the
// history is linearizable, and the three end with one table.
func TestClusterMembership(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	lc := startCluster(t, 3)
	if _, ok := lc.leader(all(3), 30*time.Second); !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	var mu sync.Mutex
	alive := all(3)
	setAlive := func(nodes []int) {
		mu.Lock()
		alive = slices.Clone(nodes)
		mu.Unlock()
	}
	l := &load{lc: lc, rec: newRecord(), keys: []string{"a", "b", "c", "d"}, stop: make(chan struct{}),
		alive: func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(alive) }}
	l.run(seed)
	progress := func(what string) {
		t.Helper()
		if !l.awaitGrants(50, time.Minute) {
			l.finish()
			t.Fatalf("no progress %s:\n%s", what, lc.logs())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	progress("at the start")

	// A fourth node joins, added at a follower.
	lead, _ := lc.leader(all(3), 30*time.Second)
	follower := (lead + 1) % 3
	n4 := lc.addNode()
	mc := &manager.Client{Addr: lc.nodes[follower].addrs.Manager, ReadTimeout: time.Minute}
	if err := mc.AddMember(ctx, manager.Member{ID: lc.nodes[n4].id, RaftAddress: lc.home[n4].addr(), Voter: true}); err != nil {
		l.finish()
		t.Fatalf("add n4 at %s: %v\n%s", lc.nodes[follower].id, err, lc.logs())
	}
	if err := lc.awaitRecorded(n4, all(4), time.Minute); err != nil {
		l.finish()
		t.Fatalf("%v\n%s", err, lc.logs())
	}
	setAlive(all(4))
	ms, err := mc.Members(ctx)
	if err != nil || len(ms) != 4 {
		t.Errorf("members after the add: %+v, %v", ms, err)
	}
	progress("with four nodes")

	// The leader leaves.
	lead, _ = lc.leader(all(4), 30*time.Second)
	rest := slices.DeleteFunc(all(4), func(i int) bool { return i == lead })
	mc = &manager.Client{Addr: lc.nodes[rest[0]].addrs.Manager, ReadTimeout: time.Minute}
	if err := mc.RemoveMember(ctx, lc.nodes[lead].id); err != nil {
		l.finish()
		t.Fatalf("remove the leader %s: %v\n%s", lc.nodes[lead].id, err, lc.logs())
	}
	setAlive(rest)
	lc.stop(lead)
	if _, ok := lc.leader(rest, 30*time.Second); !ok {
		l.finish()
		t.Fatalf("no leader after removing %s:\n%s", lc.nodes[lead].id, lc.logs())
	}
	ms, err = mc.Members(ctx)
	if err != nil || len(ms) != 3 || slices.ContainsFunc(ms, func(m manager.Member) bool { return m.ID == lc.nodes[lead].id }) {
		t.Errorf("members after the removal: %+v, %v", ms, err)
	}
	var refusal *manager.Refusal
	if err := mc.RemoveMember(ctx, lc.nodes[lead].id); !errors.As(err, &refusal) || refusal.Code != manager.CodeUnknownMember {
		t.Errorf("remove %s again: %v", lc.nodes[lead].id, err)
	}
	progress("after the removal")

	// A rolling restart of the three.
	for _, i := range rest {
		setAlive(slices.DeleteFunc(slices.Clone(rest), func(j int) bool { return j == i }))
		lc.stop(i)
		lc.start(i)
		if err := lc.awaitRecorded(i, rest, time.Minute); err != nil {
			l.finish()
			t.Fatalf("%v\n%s", err, lc.logs())
		}
		setAlive(rest)
		progress("after restarting " + lc.nodes[i].id)
	}
	l.finish()
	l.rec.check(t)
	if t.Failed() {
		t.Logf("nodes' logs:\n%s", lc.logs())
	}
	if _, err := lc.converged(rest, time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, lc.logs())
	}
}
