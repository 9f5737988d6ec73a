package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/locking-center/locking-center/mutex"
)

// followersOf returns the nodes of nodes other than lead.
func followersOf(lead *testNode, nodes []*testNode) []*testNode {
	var out []*testNode
	for _, tn := range nodes {
		if tn != lead {
			out = append(out, tn)
		}
	}
	return out
}

// A follower that comes back on another client address has it recorded
// while it follows: every node lists it and names it there once it leads,
// and the node itself names its current address from the moment it leads.
func TestFollowerRecordsItsAddress(t *testing.T) {
	nodes := newTestCluster(t, 3)
	lead := awaitLeader(t, nodes)
	f := followersOf(lead, nodes)[0]
	f.stop()
	f.cfg.ClientAddress = "moved-" + f.id + ":2"
	f.cfg.RaftListener = nil
	f.start(t)
	for _, tn := range nodes {
		eventually(t, tn.id+" lists "+f.id+" at its new client address", func() bool {
			return clientOf(tn, f.id) == f.cfg.ClientAddress
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lead.c.TransferLeadership(ctx, f.id); err != nil {
		t.Fatal(err)
	}
	eventually(t, f.id+" alone leads after the transfer", func() bool { return f.leading.Load() && !lead.leading.Load() })
	for _, tn := range nodes {
		if got := tn.n.Leader(); got != f.cfg.ClientAddress {
			t.Errorf("%s names the leader at %q, want %q", tn.id, got, f.cfg.ClientAddress)
		}
	}
}

// Every node names the leader's HTTP address as the log records it, and
// once the leader is gone and another leads, the new one's, never the
// old one's.
func TestLeaderHTTPAddress(t *testing.T) {
	nodes := newTestCluster(t, 3)
	lead := awaitLeader(t, nodes)
	for _, tn := range nodes {
		eventually(t, tn.id+" names the leader's HTTP address", func() bool {
			return tn.c.LeaderHTTP() == lead.cfg.HTTPAddress
		})
		eventually(t, tn.id+" lists every member's HTTP address", func() bool {
			for _, m := range tn.c.Status(false).Members {
				if m.HTTPAddress != "http-"+m.ID+":3" {
					return false
				}
			}
			return true
		})
	}
	lead.stop()
	rest := followersOf(lead, nodes)
	next := awaitLeader(t, rest)
	for _, tn := range rest {
		eventually(t, tn.id+" names the new leader", func() bool {
			_, id := tn.c.raft.LeaderWithID()
			return string(id) == next.id
		})
		if got := tn.c.LeaderHTTP(); got != next.cfg.HTTPAddress {
			t.Errorf("%s names the leader's HTTP address %q, want %q", tn.id, got, next.cfg.HTTPAddress)
		}
	}
}

// logCounter is a slog handler that counts the records of each message
// and passes them on to next.
type logCounter struct {
	next slog.Handler
	mu   *sync.Mutex
	n    map[string]int
}

func newLogCounter(next slog.Handler) *logCounter {
	return &logCounter{next: next, mu: new(sync.Mutex), n: map[string]int{}}
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h *logCounter) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.n[r.Message]++
	h.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *logCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCounter{next: h.next.WithAttrs(as), mu: h.mu, n: h.n}
}

func (h *logCounter) WithGroup(g string) slog.Handler {
	return &logCounter{next: h.next.WithGroup(g), mu: h.mu, n: h.n}
}

func (h *logCounter) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// A follower that comes back on another client address, and applies the
// log slowly, logs that the leader recorded its addresses once: it does
// not ask again, nor log it again, while it catches up with the entry.
func TestAddressRecordedOnce(t *testing.T) {
	const recorded = "this node's addresses recorded"
	nodes := newTestCluster(t, 3)
	lead := awaitLeader(t, nodes)
	f := followersOf(lead, nodes)[0]
	f.stop()
	logs := newLogCounter(f.cfg.Logger.Handler())
	ticks := make(chan time.Time)
	tick := func() {
		t.Helper()
		select {
		case ticks <- time.Now():
		case <-time.After(30 * time.Second):
			t.Fatal("the address loop took no tick within 30s")
		}
	}
	f.cfg.Logger = slog.New(logs)
	f.cfg.ClientAddress = "moved-" + f.id + ":2"
	f.cfg.RaftListener = nil
	f.setup = func(c *Cluster) { c.addressTicks = ticks }
	f.start(t)

	// The follower takes entries but applies none until unblock.
	f.c.fsm.mu.Lock()
	var once sync.Once
	unblock := func() { once.Do(f.c.fsm.mu.Unlock) }
	t.Cleanup(unblock)

	tick()
	eventually(t, "the leader records "+f.id+"'s new address", func() bool {
		p, _ := lead.c.fsm.logged(f.id)
		return p.ClientAddress == f.cfg.ClientAddress
	})
	// Each tick taken means the loop ended the round of the one before.
	recordedOnce := func(when string) {
		t.Helper()
		for range 3 {
			tick()
		}
		if n := logs.count(recorded); n != 1 {
			t.Fatalf("%s: %q logged %d times, want once", when, recorded, n)
		}
	}
	recordedOnce("before the follower applied the record")
	unblock()
	eventually(t, f.id+" applies the record of its new address", func() bool {
		p, _ := f.c.fsm.logged(f.id)
		return p.ClientAddress == f.cfg.ClientAddress
	})
	recordedOnce("after the follower applied it")
}

// A node started with no state and no peers waits; added at a follower
// (which forwards to the leader) it takes the log, records its own client
// address, and is listed as a reachable voter; leadership moves to it on
// request; removed, it leaves the configuration and the others go on.
func TestMembership(t *testing.T) {
	nodes := newTestCluster(t, 3)
	lead, g := tryLock(t, nodes, mutex.Claim{Key: "before", Source: "v1"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n4 := newTestNode(t, "n4", ln, nodes[0].changed)
	// n4 keeps its log in the other store: a node changes its store by
	// joining again with an empty directory, and the cluster mixes them.
	if n4.cfg.LogStore = LogStoreWAL; testLogStore(t) == LogStoreWAL {
		n4.cfg.LogStore = LogStoreBoltDB
	}
	n4.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := followersOf(lead, nodes)[0]
	if err := f.c.AddMember(ctx, Peer{ID: "n4", RaftAddress: ln.Addr().String()}, true); err != nil {
		t.Fatalf("add at a follower: %v", err)
	}
	// Again, the same: nothing changes. Another address under its id: refused.
	if err := lead.c.AddMember(ctx, Peer{ID: "n4", RaftAddress: ln.Addr().String()}, true); err != nil {
		t.Fatalf("the same add again: %v", err)
	}
	if err := lead.c.AddMember(ctx, Peer{ID: "n4", RaftAddress: "127.0.0.1:1"}, true); !errors.Is(err, ErrMemberExists) {
		t.Fatalf("n4 at another address: %v", err)
	}
	// A node that does not answer is not added.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent.Close() // nothing listens there now
	if err := f.c.AddMember(ctx, Peer{ID: "n5", RaftAddress: silent.Addr().String()}, true); !errors.Is(err, ErrBadRequest) ||
		!strings.Contains(err.Error(), "no node answers") {
		t.Fatalf("add a node that does not answer: %v", err)
	}
	for _, bad := range []Peer{{ID: "", RaftAddress: "h:1"}, {ID: "a=b", RaftAddress: "h:1"}, {ID: "n5", RaftAddress: "h"},
		{ID: "n5", RaftAddress: "0.0.0.0:1"}, {ID: "n5", RaftAddress: "h:1", ClientAddress: ":1"},
		{ID: "n5", RaftAddress: "h:99999"}, {ID: "n5", RaftAddress: "h:0"}, {ID: "n5", RaftAddress: "h:x"},
		{ID: "n5", RaftAddress: "h:1", ClientAddress: "h:65536"}} {
		if err := f.c.AddMember(ctx, bad, true); !errors.Is(err, ErrBadRequest) {
			t.Errorf("add %+v: %v", bad, err)
		}
	}
	all := append(nodes, n4)
	converge(t, lead, all)
	if s := n4.n.Snapshot(); len(s.Holders) != 1 || s.Holders[0].Token != g.Token {
		t.Fatalf("n4's table: %+v", s.Holders)
	}
	eventually(t, "n4 recorded its client address", func() bool { return clientOf(lead, "n4") == n4.cfg.ClientAddress })
	ms, err := f.c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 {
		t.Fatalf("members %+v", ms)
	}
	leaders := 0
	for _, m := range ms {
		if m.Leader {
			leaders++
		}
		if !m.Voter || !m.Reachable || m.LastContact < 0 || m.Applied == 0 || m.State == "" {
			t.Errorf("member %+v", m)
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders among %+v", leaders, ms)
	}

	if err := f.c.TransferLeadership(ctx, "n4"); err != nil {
		t.Fatalf("transfer to n4: %v", err)
	}
	eventually(t, "n4 alone leads after the transfer", func() bool { return n4.leading.Load() && !lead.leading.Load() })
	if err := lead.c.TransferLeadership(ctx, "n9"); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("transfer to a stranger: %v", err)
	}
	if err := lead.c.RemoveMember(ctx, "n4"); err != nil {
		t.Fatalf("remove the leader n4: %v", err)
	}
	eventually(t, "n4 stepped down", func() bool { return !n4.leading.Load() })
	if got := forwardAnswer(t, n4.c); got != "-" {
		t.Errorf("the removed leader n4 answered a v1 try-lock %q, want \"-\"", got)
	}
	next := awaitLeader(t, nodes)
	if err := next.c.RemoveMember(ctx, "n4"); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("remove n4 again: %v", err)
	}
	next, _ = tryLock(t, nodes, mutex.Claim{Key: "after", Source: "v1"})
	ms, err = next.c.Members(ctx)
	if err != nil || len(ms) != 3 {
		t.Fatalf("members after the removal: %+v, %v", ms, err)
	}
	for _, tn := range nodes {
		eventually(t, tn.id+" forgets n4", func() bool { return clientOf(tn, "n4") == "" && len(tn.c.Status(false).Members) == 3 })
	}
	converge(t, next, nodes)
}

// forwardAnswer hands a v1 try-lock that reached c to c's Forward and
// returns what the client read before the connection closed.
func forwardAnswer(t *testing.T, c *Cluster) string {
	t.Helper()
	client, conn := tcpPair(t)
	defer client.Close()
	go func() {
		defer conn.Close() // as the mutex port does once Forward returns
		c.Forward(conn, []byte{5, 1, 'k', 0})
	}()
	client.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(client)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	return string(b)
}

// A follower removed from the cluster forwards no v1 request: once it has
// the configuration without it, it answers '-'.
func TestRemovedFollowerAnswersFailed(t *testing.T) {
	logs := map[string]*logCounter{}
	nodes := newTestClusterWith(t, 3, testLogStore(t), func(tn *testNode) {
		logs[tn.id] = newLogCounter(tn.cfg.Logger.Handler())
		tn.cfg.Logger = slog.New(logs[tn.id])
	})
	lead := awaitLeader(t, nodes)
	f := followersOf(lead, nodes)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lead.c.RemoveMember(ctx, f.id); err != nil {
		t.Fatalf("remove %s: %v", f.id, err)
	}
	eventually(t, f.id+" has the configuration without it", func() bool { return !f.c.inConfiguration() })
	if got := forwardAnswer(t, f.c); got != "-" {
		t.Fatalf("the removed %s answered a v1 try-lock %q, want \"-\"", f.id, got)
	}
	const removed = "this node was removed from its cluster: it takes no part in raft and answers every v1 request '-'; " +
		"stop it, and to bring it back empty its RAFT_DIR and add it again"
	eventually(t, f.id+" logs its removal", func() bool { return logs[f.id].count(removed) > 0 })
	for _, tn := range nodes {
		if n := logs[tn.id].count(removed); tn != f && n != 0 || tn == f && n != 1 {
			t.Errorf("%s logged its removal %d times", tn.id, n)
		}
	}
}

// The last voter cannot be removed, and has nobody to hand the
// leadership to.
func TestRemoveLastVoter(t *testing.T) {
	nodes := newTestCluster(t, 1)
	lead := awaitLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lead.c.RemoveMember(ctx, lead.id); !errors.Is(err, ErrLastVoter) {
		t.Fatalf("remove the only voter: %v", err)
	}
	if err := lead.c.TransferLeadership(ctx, ""); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("transfer from the only voter: %v", err)
	}
}

// A v1 request that a follower could not forward because every dial of
// the leader's mutex port failed (here its client address does not
// resolve; under TLS, a certificate refused) goes unanswered, with a
// warning that names the error.
func TestForwardDialFailureWarns(t *testing.T) {
	logs := map[string]*logCounter{}
	nodes := newTestClusterWith(t, 3, testLogStore(t), func(tn *testNode) {
		tn.cfg.ForwardTimeout = 200 * time.Millisecond
		logs[tn.id] = newLogCounter(tn.cfg.Logger.Handler())
		tn.cfg.Logger = slog.New(logs[tn.id])
	})
	lead := awaitLeader(t, nodes)
	f := followersOf(lead, nodes)[0]
	eventually(t, f.id+" knows the leader", func() bool { return f.c.Leader() == lead.cfg.ClientAddress })
	if got := forwardAnswer(t, f.c); got != "" {
		t.Fatalf("answered %q", got)
	}
	const warning = "v1 request not forwarded: dialling the leader's mutex port failed"
	if n := logs[f.id].count(warning); n != 1 {
		t.Fatalf("logged %q %d times, want once", warning, n)
	}
}

// A control request that reaches the raft port while Start has not yet
// started raft is answered once raft runs, not served against no raft.
func TestControlRequestDuringStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tn := newTestNode(t, "n1", ln, make(chan struct{}, 1))
	read := make(chan struct{}, 1)
	answer := make(chan error, 1)
	tn.setup = func(c *Cluster) {
		c.controlRead = func() { read <- struct{}{} }
		c.beforeRaft = func() {
			go func() {
				resp, err := c.call(context.Background(), raft.ServerAddress(ln.Addr().String()), controlRequest{Op: opStatus})
				if err == nil && (resp.Node == nil || resp.Node.ID != "n1") {
					err = fmt.Errorf("status %+v", resp.Node)
				}
				answer <- err
			}()
			<-read // the request is in before raft starts
		}
	}
	tn.start(t)
	if err := <-answer; err != nil {
		t.Fatalf("status asked during Start: %v", err)
	}
}
