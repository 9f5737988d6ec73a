package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// raftScrape is one node's raft figures from its /metrics.
type raftScrape struct {
	state                       string // the state whose series is 1
	term, commit, applied, last float64
	leaderChanges               float64
	commands, entries           float64 // proposed by the node as a leader
	applies                     uint64  // observations of the apply histogram
}

// scrapeRaft reads node i's raft series from its /metrics. Errors: it does
// not answer, or a series is missing or not of one value.
func (lc *lcdCluster) scrapeRaft(i int) (raftScrape, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + lc.nodes[i].addrs.Metrics + "/metrics")
	if err != nil {
		return raftScrape{}, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return raftScrape{}, err
	}
	gauge := func(name string) (float64, error) {
		f, ok := families[name]
		if !ok || len(f.Metric) != 1 {
			return 0, fmt.Errorf("n%d: no single series %s", i+1, name)
		}
		m := f.Metric[0]
		if f.GetType() == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue(), nil
		}
		return m.GetGauge().GetValue(), nil
	}
	var s raftScrape
	for name, dst := range map[string]*float64{
		"locking_center_raft_term": &s.term, "locking_center_raft_commit_index": &s.commit,
		"locking_center_raft_applied_index": &s.applied, "locking_center_raft_last_index": &s.last,
		"locking_center_raft_leader_changes_total":    &s.leaderChanges,
		"locking_center_raft_proposed_commands_total": &s.commands, "locking_center_raft_proposed_entries_total": &s.entries,
	} {
		if *dst, err = gauge(name); err != nil {
			return s, err
		}
	}
	states, ok := families["locking_center_raft_state"]
	if !ok {
		return s, fmt.Errorf("n%d: no locking_center_raft_state", i+1)
	}
	ones := 0
	for _, m := range states.Metric {
		if m.GetGauge().GetValue() == 1 {
			ones++
			s.state = m.GetLabel()[0].GetValue()
		}
	}
	if ones != 1 || len(states.Metric) != 4 {
		return s, fmt.Errorf("n%d: locking_center_raft_state has %d series, %d of them 1", i+1, len(states.Metric), ones)
	}
	h, ok := families["locking_center_raft_apply_seconds"]
	if !ok || len(h.Metric) != 1 {
		return s, fmt.Errorf("n%d: no locking_center_raft_apply_seconds", i+1)
	}
	s.applies = h.Metric[0].GetHistogram().GetSampleCount()
	return s, nil
}

// awaitScrapes scrapes every node of alive until ok accepts the scrapes,
// for at most d, and returns the last ones.
func (lc *lcdCluster) awaitScrapes(alive []int, d time.Duration, ok func([]raftScrape) error) ([]raftScrape, error) {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		var got []raftScrape
		for _, i := range alive {
			s, err := lc.scrapeRaft(i)
			if err != nil {
				last = err
				break
			}
			got = append(got, s)
		}
		if len(got) == len(alive) {
			if last = ok(got); last == nil {
				return got, nil
			}
		}
		time.Sleep(pollEvery)
	}
	return nil, last
}

// oneLeader accepts scrapes in which exactly the node at lead (an index of
// the scrapes) reports leader and the others follower, all in one term.
func oneLeader(lead int) func([]raftScrape) error {
	return func(ss []raftScrape) error {
		for j, s := range ss {
			want := "follower"
			if j == lead {
				want = "leader"
			}
			if s.state != want || s.term != ss[0].term {
				return fmt.Errorf("scrape %d: %s in term %v, want %s in term %v", j, s.state, s.term, want, ss[0].term)
			}
		}
		return nil
	}
}

// checkMembers checks the members that node at lists in GET /cluster:
// each reachable with its state, applied position and last contact (0 on
// the leader; last_contact_ms in milliseconds of last_contact, in
// nanoseconds), but the node down (-1: none), unreachable with -1.
func (lc *lcdCluster) checkMembers(t *testing.T, at, down int) {
	t.Helper()
	st, ok := lc.status(at, false)
	if !ok || len(st.Members) != len(lc.nodes) {
		t.Errorf("GET /cluster on n%d: %+v", at+1, st)
		return
	}
	for _, m := range st.Members {
		if down >= 0 && m.ID == lc.nodes[down].id {
			if m.Reachable || m.LastContact != -1 || m.LastContactMS != -1 {
				t.Errorf("n%d lists %s, which is down, as %+v", at+1, m.ID, m)
			}
			continue
		}
		if !m.Reachable || m.State == "" || m.Applied == 0 || m.LastContact < 0 ||
			m.LastContactMS != m.LastContact.Milliseconds() || (m.State == "Leader") != (m.LastContact == 0) {
			t.Errorf("n%d lists %s as %+v", at+1, m.ID, m)
		}
	}
}

// The raft series of every node of a three-node cluster: one leader, the
// others followers, one term; grants move the leader's apply histogram and
// every node's commit and applied positions; a leader killed makes the
// survivors count a leader change and move to a later term.
func TestClusterRaftMetrics(t *testing.T) {
	lc := startCluster(t, 3)
	lead, ok := lc.leader(all(3), 30*time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	before, err := lc.awaitScrapes(all(3), 30*time.Second, oneLeader(lead))
	if err != nil {
		t.Fatalf("%v\n%s", err, lc.logs())
	}
	for j, s := range before {
		if s.term < 1 || s.leaderChanges < 1 || s.applied > s.commit || s.commit > s.last {
			t.Errorf("n%d before any lock: %+v", j+1, s)
		}
	}

	const cycles = 20
	client := lockingcenter.New(lc.nodes[lead].addrs.Mutex, lockingcenter.WithReadTimeout(10*time.Second))
	for k := range cycles {
		key := fmt.Sprintf("metrics-%d", k)
		if err := client.Lock(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		if err := client.Unlock(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	after, err := lc.awaitScrapes(all(3), 30*time.Second, func(ss []raftScrape) error {
		for j, s := range ss {
			if s.applied < before[lead].commit+2*cycles {
				return fmt.Errorf("n%d has applied %v, want %v or beyond", j+1, s.applied, before[lead].commit+2*cycles)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, lc.logs())
	}
	if got := after[lead].applies - before[lead].applies; got < 2*cycles {
		t.Errorf("the leader's apply histogram grew by %d observations over %d locks and unlocks", got, 2*cycles)
	}
	if cmds, entries := after[lead].commands-before[lead].commands, after[lead].entries-before[lead].entries; cmds < 2*cycles || entries < 1 || entries > cmds {
		t.Errorf("the leader proposed %v commands in %v entries over %d locks and unlocks", cmds, entries, 2*cycles)
	}

	lc.checkMembers(t, (lead+1)%3, -1)

	lc.kill(lead)
	alive := slices.DeleteFunc(all(3), func(i int) bool { return i == lead })
	next, ok := lc.leader(alive, 30*time.Second)
	if !ok {
		t.Fatalf("no new leader:\n%s", lc.logs())
	}
	lc.checkMembers(t, alive[0], lead)
	moved, err := lc.awaitScrapes(alive, 30*time.Second, oneLeader(slices.Index(alive, next)))
	if err != nil {
		t.Fatalf("%v\n%s", err, lc.logs())
	}
	for j, s := range moved {
		i := alive[j]
		if s.term <= before[i].term || s.leaderChanges <= before[i].leaderChanges {
			t.Errorf("n%d after the leader's death: term %v, leader changes %v; before: %v, %v",
				i+1, s.term, s.leaderChanges, before[i].term, before[i].leaderChanges)
		}
	}
	var b strings.Builder
	for j, s := range moved {
		fmt.Fprintf(&b, " n%d=%+v", alive[j]+1, s)
	}
	t.Logf("after the failover:%s", b.String())
}
