package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

// The snapshot backup and restore of docs/ha.md: a snapshot saved with
// lc-cli at the leader while v1 clients and sessions acquire and release
// (a follower refuses, naming the leader); every node stopped, each
// RAFT_DIR emptied and written with lc-cli snapshot restore from the one
// file and the same peers, every node started. The new cluster elects a
// leader that holds the snapshot's holders, and grants tokens above every
// token in it.
func TestClusterSnapshotRestore(t *testing.T) {
	lc := startCluster(t, 3)
	lead, ok := lc.leader(all(3), 30*time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	// Given the cluster, a follower first, lc-cli takes the snapshot at
	// the leader, which the follower's refusal names.
	var mutexes, managers []string
	for i := range 3 {
		n := (lead + 1 + i) % 3
		mutexes, managers = append(mutexes, lc.addrs(n).Mutex), append(managers, lc.addrs(n).Manager)
	}
	file := filepath.Join(t.TempDir(), "cluster.lcsnap")
	code, out, errOut := runLcCli(t, nil, "--address", strings.Join(mutexes, ","), "--manager-address", strings.Join(managers, ","),
		"snapshot", "save", file)
	if code != 0 || !strings.Contains(out, "keys") || errOut != "" {
		t.Errorf("snapshot asked of the cluster, a follower first: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	saved := saveUnderLoad(t, lc.addrs(lead).Mutex, lc.addrs(lead).Manager, file, 100)
	if len(holderTuples(saved)) < 5 {
		t.Fatalf("the snapshot holds %v", holderTuples(saved))
	}

	lead = restoreCluster(t, lc, file)
	if got, want := listedTuples(listHolders(t, lc.addrs(lead).Manager)), holderTuples(saved); !slices.Equal(got, want) {
		t.Errorf("the restored leader holds\n%s\nthe snapshot\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	lc.lockAt(t, (lead+1)%3, "after-the-restore")
	if tok := lc.leaderHolders(t, all(3))["after-the-restore"]; tok <= lastToken(saved) {
		t.Errorf("a grant after the restore has token %d, not above the snapshot's last %d", tok, lastToken(saved))
	}
	if _, err := lc.converged(all(3), time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, lc.logs())
	}
}

// restoreCluster stops every node of lc, empties each RAFT_DIR and writes
// it with lc-cli snapshot restore from file and the nodes' RAFT_PEERS,
// checks that a second restore into a node's directory is refused, starts
// every node and returns the leader they elect.
func restoreCluster(t *testing.T, lc *lcdCluster, file string) int {
	t.Helper()
	for i := range 3 {
		lc.stop(i)
	}
	for _, n := range lc.nodes {
		var peers string
		for _, kv := range n.env {
			if v, ok := strings.CutPrefix(kv, "RAFT_PEERS="); ok {
				peers = v
			}
		}
		if err := os.RemoveAll(n.dir); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runLcCli(t, nil, "snapshot", "restore", file, "--raft-dir", n.dir, "--raft-peers", peers)
		if code != 0 || !strings.HasPrefix(out, n.dir+": ") || errOut != "" {
			t.Fatalf("snapshot restore for %s: exit %d, stdout %q, stderr %q", n.id, code, out, errOut)
		}
	}
	// A directory that holds a node's state is refused.
	code, out, errOut := runLcCli(t, nil, "snapshot", "restore", file, "--raft-dir", lc.nodes[0].dir, "--raft-peers", "n1=127.0.0.1:1")
	if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "not empty") {
		t.Errorf("restore over a raft directory: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for i := range 3 {
		lc.start(i)
	}
	lead, ok := lc.leader(all(3), 30*time.Second)
	if !ok {
		t.Fatalf("no leader after the restore:\n%s", lc.logs())
	}
	return lead
}

// A single node's snapshot restores into a new cluster: the cluster's
// leader holds its holders, and its grants carry on above the single
// node's tokens (near 1.8 x 10^18), not from the small tokens of a new
// cluster.
func TestSnapshotSingleNodeToCluster(t *testing.T) {
	p, addrs := startSubprocess(t, "")
	c := lockingcenter.New(addrs.Mutex, lockingcenter.WithSource("single"))
	for i := range 3 {
		if err := c.Lock(context.Background(), fmt.Sprintf("single/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "single.lcsnap")
	if code, out, errOut := runLcCli(t, nil, "--manager-address", addrs.Manager, "snapshot", "save", file); code != 0 {
		t.Fatalf("snapshot save: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	p.terminate()
	saved := readSnapshotFile(t, file)
	lc := startCluster(t, 3)
	lead := restoreCluster(t, lc, file)
	if got, want := listedTuples(listHolders(t, lc.addrs(lead).Manager)), holderTuples(saved); !slices.Equal(got, want) {
		t.Errorf("the cluster holds\n%s\nthe single node's snapshot\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	lc.lockAt(t, lead, "after-the-move")
	if tok := lc.leaderHolders(t, all(3))["after-the-move"]; tok <= lastToken(saved) {
		t.Errorf("a grant in the cluster has token %d, not above the single node's last %d", tok, lastToken(saved))
	}
}
