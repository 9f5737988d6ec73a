package main

import (
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Pauses of the leader last from minPause to maxPause, drawn uniformly:
// from about three election timeouts (the others elect a leader while it
// is frozen, or have just begun to) to twelve.
const (
	minPause = 1500 * time.Millisecond
	maxPause = 6 * time.Second
)

// pause freezes node i with SIGSTOP for d, then lets it go on with
// SIGCONT. The process keeps its connections and its state and knows
// nothing of the time that passed: a leader wakes up believing it still
// leads.
func (lc *lcdCluster) pause(i int, d time.Duration) {
	p := lc.nodes[i].p.cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		lc.t.Fatalf("SIGSTOP %s: %v", lc.nodes[i].id, err)
	}
	defer p.Signal(syscall.SIGCONT)
	time.Sleep(d) // the fault itself: how long the process stays frozen
}

// freeze stops node i with SIGSTOP until thaw, which sends SIGCONT; thaw
// may be called more than once, and the test's cleanup calls it, before
// the node is killed.
func (lc *lcdCluster) freeze(i int) (thaw func()) {
	p := lc.nodes[i].p.cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		lc.t.Fatalf("SIGSTOP %s: %v", lc.nodes[i].id, err)
	}
	thaw = sync.OnceFunc(func() { p.Signal(syscall.SIGCONT) })
	lc.t.Cleanup(thaw)
	return thaw
}

// agreedLeader returns the index of the node that every node names as
// leader and that leads and serves, waiting for one for at most d. A
// leader just let go on still says it leads until it hears of the new
// term, so the first node to say so is not enough.
func (lc *lcdCluster) agreedLeader(d time.Duration) (int, bool) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var ids []string
		for i := range lc.nodes {
			if st, ok := lc.status(i, false); ok {
				ids = append(ids, st.LeaderID)
			}
		}
		if len(ids) == len(lc.nodes) && ids[0] != "" && !slices.ContainsFunc(ids, func(id string) bool { return id != ids[0] }) {
			i := slices.IndexFunc(lc.nodes, func(n *clusterNode) bool { return n.id == ids[0] })
			if st, ok := lc.status(i, false); ok && st.State == "Leader" && st.Ready {
				return i, true
			}
		}
		time.Sleep(pollEvery)
	}
	return 0, false
}

// The leader frozen with SIGSTOP for 1.5 to 6 s and then let go on, while
// 16 clients (8 through sessions, 8 through v1 at any node) lock and
// release four keys: whether or not the others elected a leader meanwhile,
// no answered grant is lost, tokens only grow at the resource, no two
// clients are ever in one key's critical section, and the history is
// linearizable. Afterwards the nodes hold one table and, stopped, one raft
// log up to the commit index, entry by entry.
func TestClusterLeaderPaused(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1<<32))
	lc, l, setAlive := startSoak(t, seed)
	var f faults
	deposed := 0
	for round := range clusterRounds(t) {
		if !l.awaitGrants(50, time.Minute) {
			l.finish()
			t.Fatalf("round %d: no progress before the pause:\n%s", round, lc.logs())
		}
		lead, _ := lc.leader(all(3), 30*time.Second)
		d := minPause + time.Duration(r.Int64N(int64(maxPause-minPause)))
		// New connections go to the others while it is frozen, as a client
		// that times out on a node tries the next; those it has stay.
		setAlive(slices.DeleteFunc(all(3), func(i int) bool { return i == lead }))
		lc.pause(lead, d)
		f.pauses = append(f.pauses, d)
		setAlive(all(3))
		next, ok := lc.agreedLeader(30 * time.Second)
		if !ok {
			l.finish()
			t.Fatalf("round %d: no leader after n%d's pause of %v:\n%s", round, lead+1, d, lc.logs())
		}
		if next != lead {
			deposed++
		}
		t.Logf("round %d: n%d paused for %v; n%d leads", round, lead+1, d.Round(time.Millisecond), next+1)
		if !l.awaitGrants(50, time.Minute) {
			l.finish()
			t.Fatalf("round %d: no progress after n%d's pause:\n%s", round, lead+1, lc.logs())
		}
	}
	l.finish()
	t.Logf("another node led after %d of %d pauses", deposed, len(f.pauses))
	summarize(t, lc, l.rec, f)
}
