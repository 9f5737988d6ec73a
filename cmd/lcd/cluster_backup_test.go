package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
)

// leaderHolders lists the held keys at the leader of the nodes of alive:
// key -> token.
func (lc *lcdCluster) leaderHolders(t *testing.T, alive []int) map[string]uint64 {
	t.Helper()
	lead, ok := lc.leader(alive, 30*time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs, err := (&manager.Client{Addr: lc.nodes[lead].addrs.Manager}).Holders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, h := range hs {
		out[h.Key] = h.Token
	}
	return out
}

// lockAt takes key through v1 at node i (a follower forwards it).
func (lc *lcdCluster) lockAt(t *testing.T, i int, key string) {
	t.Helper()
	c := lockingcenter.New(lc.nodes[i].addrs.Mutex, lockingcenter.WithSource("backup-test"),
		lockingcenter.WithReadTimeout(10*time.Second))
	if err := c.Lock(context.Background(), key); err != nil {
		t.Fatalf("lock %s at n%d: %v", key, i+1, err)
	}
}

// The backup and restore of docs/ha.md: a follower stopped with SIGTERM,
// its RAFT_DIR copied while the other two serve, the follower started
// again; later, every node stopped, each RAFT_DIR replaced by the copy,
// every node started. The cluster comes back with the table of the copy,
// not the changes made after it, and its tokens stay above the copy's.
// With each raft log store.
func TestClusterBackupRestore(t *testing.T) {
	for _, store := range []string{"boltdb", "wal"} {
		t.Run(store, func(t *testing.T) { testClusterBackupRestore(t, store) })
	}
}

func testClusterBackupRestore(t *testing.T, store string) {
	lc := startClusterWith(t, 3, []string{"RAFT_LOG_STORE=" + store})
	lead, ok := lc.leader(all(3), 30*time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	for k := range 5 {
		lc.lockAt(t, lead, fmt.Sprintf("kept-%d", k))
	}
	backedUp := lc.leaderHolders(t, all(3))
	if _, err := lc.converged(all(3), time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, lc.logs())
	}

	follower := (lead + 1) % 3
	lc.stop(follower)
	backup := t.TempDir() + "/raft"
	if err := os.CopyFS(backup, os.DirFS(lc.nodes[follower].dir)); err != nil {
		t.Fatal(err)
	}
	lc.start(follower)
	others := slices.DeleteFunc(all(3), func(i int) bool { return i == follower })
	lc.lockAt(t, others[0], "after-the-backup")
	if got := lc.leaderHolders(t, all(3)); len(got) != len(backedUp)+1 {
		t.Fatalf("before the restore the leader holds %v", got)
	}

	for i := range 3 {
		lc.stop(i)
	}
	for _, n := range lc.nodes {
		if err := os.RemoveAll(n.dir); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(n.dir, os.DirFS(backup)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		lc.start(i)
	}
	restored := lc.leaderHolders(t, all(3))
	if len(restored) != len(backedUp) {
		t.Errorf("restored %v, want the backup's %v", restored, backedUp)
	}
	var highest uint64
	for k, tok := range backedUp {
		if restored[k] != tok {
			t.Errorf("%s: token %d after the restore, %d in the backup", k, restored[k], tok)
		}
		highest = max(highest, tok)
	}
	lead, _ = lc.leader(all(3), 30*time.Second)
	lc.lockAt(t, lead, "after-the-restore")
	if tok := lc.leaderHolders(t, all(3))["after-the-restore"]; tok <= highest {
		t.Errorf("a grant after the restore has token %d, not above the backup's %d", tok, highest)
	}
	if _, err := lc.converged(all(3), time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, lc.logs())
	}
}
