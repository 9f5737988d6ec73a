package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/locking-center/locking-center/cluster"
)

// replicas is what checkReplicas found: the positions compared, and the
// first at which two logs differ (0: none).
type replicas struct {
	from, to uint64
	differ   uint64
}

func (r replicas) String() string {
	switch {
	case r.differ != 0:
		return fmt.Sprintf("replicas differ at index %d (identical from %d to %d)", r.differ, r.from, r.differ-1)
	case r.from > r.to:
		return "replicas: no index that every node holds up to the commit"
	}
	return fmt.Sprintf("replicas identical up to index %d (from %d)", r.to, r.from)
}

// checkReplicas checks that the nodes hold one table and one log: it waits
// until they report one applied index, one commit index and one table
// digest, stops them all with SIGTERM, and then compares their raft logs,
// read from their RAFT_DIRs, entry by entry (index, term, type, data)
// over every position that every node still holds (a snapshot may have
// let a log's oldest entries go) up to the lowest commit index the nodes
// reported: up to its commit index a node's log is the leader's. It
// fails t on a difference, naming the first position that differs and
// both entries. A node whose tables differ is still compared: the logs
// tell where they parted.
func (lc *lcdCluster) checkReplicas(t *testing.T) replicas {
	t.Helper()
	nodes := all(len(lc.nodes))
	if _, err := lc.converged(nodes, time.Minute); err != nil {
		t.Errorf("tables: %v", err)
	}
	var commit uint64
	for _, i := range nodes {
		if st, ok := lc.status(i, false); ok && (commit == 0 || st.CommitIndex < commit) {
			commit = st.CommitIndex
		}
	}
	for _, i := range nodes {
		lc.stop(i)
	}
	var logs []*cluster.LogReader
	for _, i := range nodes {
		r, err := cluster.OpenLog(lc.nodes[i].dir)
		if err != nil {
			t.Fatalf("%s: %v", lc.nodes[i].id, err)
		}
		defer r.Close()
		logs = append(logs, r)
	}
	names := make([]string, len(nodes))
	for i := range nodes {
		names[i] = lc.nodes[i].id
	}
	res, err := compareLogs(names, logs, commit)
	if err != nil {
		t.Error(err)
	}
	return res
}

// compareLogs compares the logs entry by entry over every position that
// all of them hold up to commit (0: up to the last they all hold), and
// returns the range compared and the first position that differs, with
// an error that describes both entries.
func compareLogs(names []string, logs []*cluster.LogReader, commit uint64) (replicas, error) {
	res := replicas{to: commit}
	if commit == 0 {
		res.to = logs[0].LastIndex()
	}
	for _, r := range logs {
		res.from = max(res.from, r.FirstIndex())
		res.to = min(res.to, r.LastIndex())
	}
	for index := res.from; index <= res.to && index > 0; index++ {
		first, err := logs[0].Entry(index)
		if err != nil {
			return res, fmt.Errorf("%s: entry %d: %w", names[0], index, err)
		}
		for j, r := range logs[1:] {
			e, err := r.Entry(index)
			if err != nil {
				return res, fmt.Errorf("%s: entry %d: %w", names[j+1], index, err)
			}
			if e.Index != first.Index || e.Term != first.Term || e.Type != first.Type || !bytes.Equal(e.Data, first.Data) {
				res.differ = index
				return res, fmt.Errorf("the raft logs differ at index %d (compared from %d to %d):\n  %s has %s\n  %s has %s",
					index, res.from, res.to, names[0], describeEntry(first), names[j+1], describeEntry(e))
			}
		}
	}
	return res, nil
}

// describeEntry says what a raft log entry holds, for a failure message.
func describeEntry(e *raft.Log) string {
	data := e.Data
	if len(data) > 160 {
		data = data[:160]
	}
	return fmt.Sprintf("index %d, term %d, %v, %d bytes of data: %q", e.Index, e.Term, e.Type, len(e.Data), data)
}

// faults are the faults a soak injected, for its summary.
type faults struct {
	kills, partitions int
	pauses            []time.Duration
}

func (f faults) String() string {
	var parts []string
	if f.kills > 0 {
		parts = append(parts, fmt.Sprintf("kills %d", f.kills))
	}
	if f.partitions > 0 {
		parts = append(parts, fmt.Sprintf("partitions %d", f.partitions))
	}
	if len(f.pauses) > 0 {
		var ds []string
		for _, d := range f.pauses {
			ds = append(ds, d.Round(100*time.Millisecond).String())
		}
		parts = append(parts, fmt.Sprintf("pauses %d (%s)", len(f.pauses), strings.Join(ds, " ")))
	}
	return strings.Join(parts, ", ")
}

// summarize checks the record and the replicas, and logs the soak's
// figures in one line.
func summarize(t *testing.T, lc *lcdCluster, rec *record, f faults) {
	t.Helper()
	violations := rec.check(t)
	if t.Failed() {
		t.Logf("nodes' logs:\n%s", lc.logs())
	}
	reps := lc.checkReplicas(t)
	rec.mu.Lock()
	releases := rec.releases
	rec.mu.Unlock()
	t.Logf("summary: faults: %v; %d grants, %d releases; %d violations; %v",
		f, rec.grants.Load(), releases, violations, reps)
}

// compareLogs passes logs that agree up to the commit index, whatever
// each holds beyond it and though one lost its head to a snapshot, and
// names the first position where a term, a type or the data differs.
func TestCompareLogs(t *testing.T) {
	entry := func(i, term uint64) *raft.Log {
		return &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("command %d", i))}
	}
	// write makes a RAFT_DIR whose log holds from..to, each entry as
	// change makes it.
	write := func(from, to uint64, change func(*raft.Log)) *cluster.LogReader {
		dir := t.TempDir()
		s, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
		if err != nil {
			t.Fatal(err)
		}
		for i := from; i <= to; i++ {
			e := entry(i, 1+i/10)
			change(e)
			if err := s.StoreLog(e); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		r, err := cluster.OpenLog(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	same := func(*raft.Log) {}
	names := []string{"n1", "n2", "n3"}
	// Beyond 15, uncommitted: n1 has term 2's entries, n2 term 5's.
	n1, n2 := write(1, 17, same), write(1, 18, func(e *raft.Log) {
		if e.Index > 15 {
			e.Term = 5
		}
	})
	got, err := compareLogs(names, []*cluster.LogReader{n1, n2, write(5, 15, same)}, 15)
	if err != nil || got != (replicas{from: 5, to: 15}) {
		t.Errorf("logs that agree up to the commit: %+v, %v", got, err)
	}
	for name, change := range map[string]func(*raft.Log){
		"term": func(e *raft.Log) { e.Term++ },
		"type": func(e *raft.Log) { e.Type = raft.LogNoop },
		"data": func(e *raft.Log) { e.Data = append(e.Data, '!') },
	} {
		n3 := write(5, 15, func(e *raft.Log) {
			if e.Index >= 12 {
				change(e)
			}
		})
		got, err := compareLogs(names, []*cluster.LogReader{n1, n2, n3}, 15)
		if got.differ != 12 || err == nil || !strings.Contains(err.Error(), "differ at index 12") ||
			!strings.Contains(err.Error(), "n3 has index 12") {
			t.Errorf("%s differs from 12 on: %+v, %v", name, got, err)
		}
	}
}
