package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/locking-center/locking-center/mutex"
)

// testNode is one node of an in-process cluster.
type testNode struct {
	id      string
	cfg     Config
	c       *Cluster
	n       *mutex.Node
	leading atomic.Bool    // OnLeader's last call
	changed chan struct{}  // shared by the cluster's nodes: a node's OnLeader was called
	setup   func(*Cluster) // when set, called between New and Start
}

// tWriter sends logs to t.Log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// testLogStore is the log store of the test nodes: LC_TEST_LOG_STORE
// when set (LC_TEST_LOG_STORE=wal go test ./cluster runs every test on the
// WAL), else the default. Tests that mean both stores run a subtest of each.
func testLogStore(t testing.TB) LogStore {
	ls, err := ParseLogStore(os.Getenv("LC_TEST_LOG_STORE"))
	if err != nil {
		t.Fatalf("LC_TEST_LOG_STORE: %v", err)
	}
	return ls
}

// logStores are the stores a test runs on, each in a subtest.
var logStores = []LogStore{LogStoreBoltDB, LogStoreWAL}

// newTestCluster starts n nodes on loopback, each in a directory of its
// own, bootstrapped as one cluster, on testLogStore.
func newTestCluster(t *testing.T, size int) []*testNode {
	t.Helper()
	return newTestClusterOn(t, size, testLogStore(t))
}

// newTestClusterOn is newTestCluster on the log store ls.
func newTestClusterOn(t *testing.T, size int, ls LogStore) []*testNode {
	t.Helper()
	return newTestClusterWith(t, size, ls, nil)
}

// newTestClusterWith is newTestClusterOn with prepare, unless nil, called
// on each node before it starts.
func newTestClusterWith(t *testing.T, size int, ls LogStore, prepare func(*testNode)) []*testNode {
	t.Helper()
	var peers []Peer
	var lns []net.Listener
	for i := range size {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		id := fmt.Sprintf("n%d", i+1)
		peers = append(peers, Peer{ID: id, RaftAddress: ln.Addr().String(), ClientAddress: "client-" + id + ":1"})
	}
	var nodes []*testNode
	changed := make(chan struct{}, 1)
	for i, p := range peers {
		tn := newTestNode(t, p.ID, lns[i], changed)
		tn.cfg.Peers, tn.cfg.LogStore = peers, ls
		if prepare != nil {
			prepare(tn)
		}
		tn.start(t)
		nodes = append(nodes, tn)
	}
	return nodes
}

// newTestNode returns a node of id on ln that is not started, with no
// peers, sharing changed with the nodes of its cluster.
func newTestNode(t *testing.T, id string, ln net.Listener, changed chan struct{}) *testNode {
	tn := &testNode{id: id, changed: changed}
	tn.cfg = Config{NodeID: id, RaftBind: ln.Addr().String(), RaftListener: ln, Dir: t.TempDir(),
		LogStore: testLogStore(t), ClientAddress: "client-" + id + ":1", HTTPAddress: "http-" + id + ":3", ElectionTimeout: testElection,
		Logger: testLogger(t).With("node", id),
		OnLeader: func(l bool) {
			tn.leading.Store(l)
			select {
			case changed <- struct{}{}:
			default:
			}
		}}
	return tn
}

// eventually polls cond until it holds, for at most 30 s, and fails t
// with what otherwise. The nodes' state changes in their own goroutines
// with nothing to wait on from here.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clientOf returns the client address that tn's status lists for id.
func clientOf(tn *testNode, id string) string {
	for _, m := range tn.c.Status(false).Members {
		if m.ID == id {
			return m.ClientAddress
		}
	}
	return ""
}

// start starts the node on its configuration.
func (tn *testNode) start(t *testing.T) {
	t.Helper()
	c, err := New(tn.cfg)
	if err != nil {
		t.Fatal(err)
	}
	tn.c = c
	if tn.setup != nil {
		tn.setup(c)
	}
	tn.n = mutex.NewNode(mutex.NodeConfig{Replicator: c})
	if err := c.Start(tn.n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tn.stop)
}

// stop closes the node; it is safe to call more than once.
func (tn *testNode) stop() {
	tn.c.Close()
	tn.n.Close()
}

// restart stops the node and starts it again on its directory and port.
func (tn *testNode) restart(t *testing.T) {
	t.Helper()
	tn.stop()
	tn.cfg.RaftListener = nil
	tn.start(t)
}

// testElection is the election timeout of the test nodes: above what a
// loaded machine with the race detector stalls for, so that leaders do not
// change when the test does not mean them to.
const testElection = 500 * time.Millisecond

// tryLock takes c.Key at the leader of nodes, asking again at the next
// leader when the one asked lost its leadership first; a try whose outcome
// was unknown and that took effect holds the key with c.Source, and
// counts. It returns the leader that answered, and the grant.
func tryLock(t *testing.T, nodes []*testNode, c mutex.Claim) (*testNode, mutex.Grant) {
	t.Helper()
	for range 10 {
		lead := awaitLeader(t, nodes)
		g, _, err := lead.n.TryLock(c)
		if err == nil {
			return lead, g
		}
		if !errors.Is(err, mutex.ErrRefused) && !errors.Is(err, mutex.ErrBusy) {
			t.Fatalf("try %s: %v", c.Key, err)
		}
		if lead.n.Linearize() != nil {
			continue
		}
		for _, h := range lead.n.Snapshot().Holders {
			if h.Key == c.Key && h.Source == c.Source {
				return lead, mutex.Grant{Token: h.Token, Key: h.Key, Source: h.Source, RemoteAddr: h.RemoteAddr}
			}
		}
	}
	t.Fatalf("try %s: no leader granted it", c.Key)
	return nil, mutex.Grant{}
}

// awaitLeader returns the node of nodes that says it leads, once one does
// and is ready to serve.
func awaitLeader(t *testing.T, nodes []*testNode) *testNode {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		for _, tn := range nodes {
			if tn.leading.Load() {
				return tn
			}
		}
		select {
		case <-nodes[0].changed:
		case <-timeout:
			t.Fatal("no leader within 30s")
		}
	}
}

// exportOf returns the node's table as records.
func exportOf(n *mutex.Node) []mutex.Record {
	var out []mutex.Record
	n.Export(func(r *mutex.Record) { out = append(out, *r) })
	return out
}

// converge waits until every node has applied the leader's commit index
// and checks that all hold the leader's table.
func converge(t *testing.T, lead *testNode, nodes []*testNode) {
	t.Helper()
	idx := lead.c.raft.CommitIndex()
	want := exportOf(lead.n)
	for _, tn := range nodes {
		if err := tn.c.waitApplied(idx, 30*time.Second); err != nil {
			t.Fatalf("%s did not apply %d: %v", tn.id, idx, err)
		}
		if got := exportOf(tn.n); !slices.Equal(got, want) {
			t.Fatalf("%s differs from the leader:\n got %+v\nwant %+v", tn.id, got, want)
		}
	}
}

// Three nodes elect a leader that serves; followers refuse, name the
// leader's client address and hold the same table; tokens carry the log's
// positions; a restarted follower reads its state back from its snapshot
// and its log; the leader's departure elects another, which keeps the
// locks and sessions.
func TestCluster(t *testing.T) {
	for _, ls := range logStores {
		t.Run(string(ls), func(t *testing.T) { testCluster(t, ls) })
	}
}

func testCluster(t *testing.T, ls LogStore) {
	nodes := newTestClusterOn(t, 3, ls)
	lead, g := tryLock(t, nodes, mutex.Claim{Key: "k", Source: "v1", RemoteAddr: "10.0.0.1:1"})
	if g.Token>>mutex.TokenShift == 0 {
		t.Fatalf("token %#x does not carry the entry's position", g.Token)
	}
	if err := lead.n.Linearize(); err != nil {
		t.Fatalf("the leader's linearized read: %v", err)
	}
	live, res, _ := lead.n.OpenSession("svc", 10*time.Second, [mutex.SecretHashLen]byte{1}, "", nil)
	if live == nil {
		t.Fatalf("open session: %v", res.Status)
	}
	// A holder's note goes through the log with its grant.
	const note = "job 7 on host-3"
	noted := mutex.Command{Op: mutex.OpAcquire, Session: live.ID(), Request: 1, Key: "noted", Source: "svc", Note: note}
	if res, _, _ := lead.n.ApplySession(noted); res.Status != mutex.StatusGranted {
		t.Fatalf("acquire with a note: %v", res.Status)
	}
	var followers []*testNode
	for _, tn := range nodes {
		if tn != lead {
			followers = append(followers, tn)
		}
	}
	converge(t, lead, nodes)
	for _, f := range followers {
		if res, _ := f.n.Apply(mutex.Command{Op: mutex.OpRelease, Key: "k"}); res.Status != mutex.StatusUnavailable {
			t.Fatalf("%s applied a release: %v", f.id, res.Status)
		}
		if err := f.n.Linearize(); !errors.Is(err, mutex.ErrNotLeader) {
			t.Fatalf("%s's linearized read: %v", f.id, err)
		}
		if got, want := f.n.Leader(), lead.c.cfg.ClientAddress; got != want {
			t.Fatalf("%s names leader %q, want %q", f.id, got, want)
		}
	}

	// A follower restarted from a snapshot and the log after it.
	f := followers[0]
	if err := f.c.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	lead, _ = tryLock(t, nodes, mutex.Claim{Key: "after-snapshot", Source: "v1"})
	f.restart(t)
	converge(t, lead, nodes)

	// The leader leaves; another takes over with the same table.
	lead.stop()
	next := awaitLeader(t, followers)
	if s := next.n.Snapshot(); len(s.Sessions) != 1 || len(s.Holders) != 3 {
		t.Fatalf("after the failover: %d sessions, %d holders", len(s.Sessions), len(s.Holders))
	}
	for _, tn := range followers { // one of them restarted from a snapshot
		if h := tn.n.Describe("noted").Holders; len(h) != 1 || h[0].Note != note {
			t.Fatalf("%s: holders of the noted key %+v", tn.id, h)
		}
	}
	next, g2 := tryLock(t, followers, mutex.Claim{Key: "k2", Source: "v1"})
	if g2.Token <= g.Token {
		t.Fatalf("token %d after %d", g2.Token, g.Token)
	}
	st := next.c.Status(true)
	if st.State != "Leader" || !st.Ready || st.Digest == "" || st.Leader != next.c.cfg.ClientAddress {
		t.Fatalf("status %+v", st)
	}
}

// Entries decode to what was encoded; anything else is refused.
func TestEntries(t *testing.T) {
	c := mutex.Command{Op: mutex.OpAcquire, At: time.Unix(0, 1_700_000_000_000_000_001), Key: "k\xff",
		Source: "s", Proposer: 1 << 63, Proposal: 7}
	e, err := decodeEntry(appendCommandEntry(nil, &c))
	if err != nil || e.kind != entryCommand || e.cmd.Proposer != c.Proposer || e.cmd.Proposal != 7 ||
		e.cmd.Key != c.Key || !e.cmd.At.Equal(c.At) {
		t.Fatalf("command entry: %+v, %v", e, err)
	}
	p := Peer{ID: "n1", RaftAddress: "10.0.0.1:7000", ClientAddress: "10.0.0.1:22119", HTTPAddress: "10.0.0.1:22122"}
	if e, err := decodeEntry(memberEntry(p)); err != nil || e.kind != entryMember || e.member != p {
		t.Fatalf("member entry: %+v, %v", e, err)
	}
	// A record of a node without an HTTP address, as lcd wrote them
	// before it recorded one.
	old := append([]byte{entryMember}, `{"id":"n1","raft":"10.0.0.1:7000","client":"10.0.0.1:22119"}`...)
	want := Peer{ID: "n1", RaftAddress: "10.0.0.1:7000", ClientAddress: "10.0.0.1:22119"}
	if e, err := decodeEntry(old); err != nil || e.kind != entryMember || e.member != want {
		t.Fatalf("member entry without an HTTP address: %+v, %v", e, err)
	}
	// A batch entry holds its commands in order.
	b := batch{}
	for i := range 3 {
		c.Proposal, c.Key = uint64(10+i), fmt.Sprintf("k%d", i)
		b.data = appendCommandEntry(b.data, &c)
		b.ends = append(b.ends, len(b.data))
	}
	if e, err := decodeEntry(b.entry()); err != nil || e.kind != entryBatch || len(e.cmds) != 3 ||
		e.cmds[2].Key != "k2" || e.cmds[2].Proposal != 12 || e.cmds[0].Proposer != c.Proposer {
		t.Fatalf("batch entry: %+v, %v", e, err)
	}
	one := batch{data: appendCommandEntry(nil, &c)}
	one.ends = []int{len(one.data)}
	if got := one.entry(); got[0] != entryCommand {
		t.Fatalf("a batch of one is an entry of kind %d", got[0])
	}
	whole := b.entry()
	notCommands := batch{data: slices.Clone(b.data), ends: b.ends}
	notCommands.data[0] = entryMember
	for _, bad := range [][]byte{
		{entryBatch},             // no count
		{entryBatch, 1, 2, 1, 1}, // a batch of one
		whole[:len(whole)-1],     // cut
		append(whole, 0),         // trailing
		notCommands.entry(),      // a member entry inside
		{entryBatch, 2, 0, 0},    // empty commands
	} {
		if _, err := decodeEntry(bad); !errors.Is(err, errEntry) {
			t.Fatalf("batch %q: %v", bad, err)
		}
	}
	for _, b := range [][]byte{nil, {0}, {entryCommand}, {entryCommand, 1}, {entryCommand, 1, 1, 'x'},
		{entryMember, '{', '}'}, {9, 1}} {
		if _, err := decodeEntry(b); !errors.Is(err, errEntry) {
			t.Fatalf("%q: %v", b, err)
		}
	}
}

// A snapshot stream reads back to its header and table; a cut one is
// refused.
func TestSnapshotStream(t *testing.T) {
	tb := mutex.NewTable()
	tb.Apply(&mutex.Command{Op: mutex.OpAcquire, At: time.Unix(5, 0), Key: "a", Source: "s", Floor: 1 << 20})
	h := snapshotHeader{Format: snapshotFormat, Index: 42, Members: []memberJSON{{ID: "n1", Raft: "r:1", Client: "c:1"}}}
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, &h, tb); err != nil {
		t.Fatal(err)
	}
	gh, gt, err := readSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil || gh.Index != 42 || len(gh.Members) != 1 || TableDigest(gt) != TableDigest(tb) {
		t.Fatalf("read back %+v, %v", gh, err)
	}
	for cut := range buf.Len() {
		if cut == 0 {
			continue
		}
		if _, _, err := readSnapshot(io.LimitReader(bytes.NewReader(buf.Bytes()), int64(cut))); err == nil {
			t.Fatalf("a stream cut at %d of %d was taken", cut, buf.Len())
		}
	}
}

// A copy of one node's newest snapshot directory, put into empty raft
// directories of every node, brings the cluster back: the nodes restore
// the table and the configuration from it, elect a leader, and go on
// with tokens above the backup's.
func TestRestoreFromSnapshot(t *testing.T) {
	nodes := newTestCluster(t, 3)
	var top uint64
	var lead *testNode
	for i := range 5 {
		var g mutex.Grant
		lead, g = tryLock(t, nodes, mutex.Claim{Key: fmt.Sprint("k", i), Source: "v1"})
		top = max(top, g.Token)
	}
	if err := lead.c.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	holders := func(n *mutex.Node) []mutex.Record {
		var out []mutex.Record
		for _, r := range exportOf(n) {
			if r.Kind == mutex.RecordHolder {
				out = append(out, r)
			}
		}
		return out
	}
	want := holders(lead.n)
	snaps, err := os.ReadDir(filepath.Join(lead.cfg.Dir, snapshotsDir))
	if err != nil || len(snaps) == 0 {
		t.Fatalf("no snapshot in %s: %v", lead.cfg.Dir, err)
	}
	backup := filepath.Join(lead.cfg.Dir, snapshotsDir, snaps[len(snaps)-1].Name())
	for _, tn := range nodes {
		tn.stop()
	}
	for _, tn := range nodes {
		dir := t.TempDir()
		dst := filepath.Join(dir, snapshotsDir, filepath.Base(backup))
		if err := os.CopyFS(dst, os.DirFS(backup)); err != nil {
			t.Fatal(err)
		}
		tn.cfg.Dir, tn.cfg.RaftListener = dir, nil
		tn.start(t)
	}
	lead = awaitLeader(t, nodes)
	if got := holders(lead.n); !slices.Equal(got, want) {
		t.Fatalf("restored holders:\n got %+v\nwant %+v", got, want)
	}
	lead, g := tryLock(t, nodes, mutex.Claim{Key: "after", Source: "v1"})
	if g.Token <= top {
		t.Fatalf("token %d after restoring %d", g.Token, top)
	}
	converge(t, lead, nodes)
}

// Raft's formatted log values are rendered, not printed as their parts.
func TestLogFormat(t *testing.T) {
	var b bytes.Buffer
	l := newHCLogger(slog.New(slog.NewTextHandler(&b, nil)), nil)
	l.Info("initial configuration", "servers", hclog.Fmt("%+v", []int{1, 2}), "n", 3)
	if got := b.String(); !strings.Contains(got, `servers="[1 2]" n=3`) {
		t.Fatalf("logged %q", got)
	}
}

// The errors raft logs on every clean stop of a leader go at a lower level
// once the node is closing, and only then; raft's other errors keep theirs.
func TestStopLevel(t *testing.T) {
	var b bytes.Buffer
	closing := make(chan struct{})
	l := newHCLogger(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})), closing)
	trans := l.Named("transport").With("k", "v")
	logAll := func() []string {
		b.Reset()
		trans.Error(msgDecodeFailed, "error", raft.ErrTransportShutdown)
		trans.Error(msgDecodeFailed, "error", io.ErrUnexpectedEOF)
		l.Error(msgNewerTerm, "peer", "n2")
		l.Error("failed to appendEntries to", "peer", "n2", "error", raft.ErrTransportShutdown)
		var levels []string
		for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			_, rest, _ := strings.Cut(line, "level=")
			lv, _, _ := strings.Cut(rest, " ")
			levels = append(levels, lv)
		}
		return levels
	}
	if got, want := logAll(), []string{"ERROR", "ERROR", "ERROR", "ERROR"}; !slices.Equal(got, want) {
		t.Errorf("while running: %v, want %v", got, want)
	}
	close(closing)
	if got, want := logAll(), []string{"DEBUG", "ERROR", "INFO", "ERROR"}; !slices.Equal(got, want) {
		t.Errorf("closing: %v, want %v", got, want)
	}
}

// tcpPair returns the two ends of a TCP connection on 127.0.0.1: the
// dialler's and the acceptor's.
func tcpPair(t *testing.T) (dialled, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialled, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if accepted, err = ln.Accept(); err != nil {
		dialled.Close()
		t.Fatal(err)
	}
	return dialled, accepted
}

// A forwarded connection that this node cuts (it is shutting down) ends
// cleanly at the leader, which keeps a grant the client may have read;
// one the client resets is reset at the leader.
func TestForwardCutEndsCleanly(t *testing.T) {
	for _, cut := range []string{"by this node", "by the client"} {
		t.Run(cut, func(t *testing.T) {
			client, front := tcpPair(t)
			defer client.Close()
			up, leader := tcpPair(t)
			defer leader.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				proxy(front, up, []byte{1, 1, 'k', 0})
			}()
			req := make([]byte, 4)
			if _, err := io.ReadFull(leader, req); err != nil {
				t.Fatal(err)
			}
			leader.Write([]byte{'+'})
			if _, err := io.ReadFull(client, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			if cut == "by this node" {
				front.Close()
			} else {
				client.(*net.TCPConn).SetLinger(0)
				client.Close()
			}
			_, err := io.ReadAll(leader)
			if reset := err != nil; reset != (cut == "by the client") {
				t.Fatalf("the leader read %v", err)
			}
			leader.Close() // the leader's end after its answer
			<-done
		})
	}
}

// stuckFuture is a raft future that raft never answers.
type stuckFuture struct{ release chan struct{} }

func (f stuckFuture) Error() error { <-f.release; return nil }

// A future that raft leaves unanswered at its shutdown does not hold up
// its waiter: await returns once raft has shut down, or the node closes.
func TestAwaitEndsAtShutdown(t *testing.T) {
	for _, end := range []string{"raft shut down", "closing"} {
		c := &Cluster{quit: make(chan struct{}), raftDone: make(chan struct{})}
		f := stuckFuture{release: make(chan struct{})}
		if end == "closing" {
			close(c.quit)
		} else {
			c.closeRaftDone()
			c.closeRaftDone()
		}
		if err := c.await(f); !errors.Is(err, raft.ErrRaftShutdown) {
			t.Errorf("%s: %v", end, err)
		}
		close(f.release)
	}
}

// A Start that fails once raft runs (here its bootstrap, refused for two
// peers at one raft address) leaves a Cluster that Close stops at once.
func TestCloseAfterFailedStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tn := newTestNode(t, "n1", ln, make(chan struct{}, 1))
	addr := ln.Addr().String()
	tn.cfg.Peers = []Peer{{ID: "n1", RaftAddress: addr}, {ID: "n2", RaftAddress: addr}}
	c, err := New(tn.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(mutex.NewNode(mutex.NodeConfig{Replicator: c})); err == nil {
		c.Close()
		t.Fatal("a bootstrap of two peers at one raft address started")
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close after a failed Start did not return")
	}
}

// An entry that does not decode stops the node's state machine: nothing
// after it applies (the table would no longer follow the log), no
// snapshot is taken, and the node's owner is told, once.
func TestDamagedEntryStopsTheNode(t *testing.T) {
	n := mutex.NewNode(mutex.NodeConfig{})
	defer n.Close()
	f := newFSM(n, slog.New(slog.DiscardHandler))
	var told []error
	f.fatal = func(err error) { told = append(told, err) }
	at := time.Unix(1_800_000_000, 0)
	acquire := func(key string) []byte {
		return appendCommandEntry(nil, &mutex.Command{Op: mutex.OpAcquire, At: at, Key: key, Source: "s", Floor: 1 << 20})
	}
	f.Apply(&raft.Log{Index: 1, Data: acquire("before")})
	f.Apply(&raft.Log{Index: 2, Data: []byte{entryCommand, 1}})
	f.Apply(&raft.Log{Index: 3, Data: acquire("after")})
	if len(told) != 1 || !errors.Is(told[0], errEntry) || !strings.Contains(told[0].Error(), "entry 2") {
		t.Fatalf("told %v, want once, of entry 2", told)
	}
	if _, ok := n.Holder("before"); !ok {
		t.Fatal("the entry before the damaged one did not apply")
	}
	if _, ok := n.Holder("after"); ok {
		t.Fatal("an entry after the damaged one applied")
	}
	if got := f.applied.Load(); got != 1 {
		t.Fatalf("applied index %d, want 1", got)
	}
	if _, err := f.Snapshot(); err == nil {
		t.Fatal("a snapshot of a table that no longer follows the log was taken")
	}
}

// brokenLogs lists entries it cannot read back, as a damaged log store
// does.
type brokenLogs struct{ *raft.InmemStore }

func (b brokenLogs) GetLog(i uint64, l *raft.Log) error {
	if i == 1 {
		return errors.New("short buffer")
	}
	return b.InmemStore.GetLog(i, l)
}

// A log store that cannot read back the entries it lists makes raft's
// constructor panic; newRaft returns that as ErrDamagedLog instead.
func TestDamagedLogAtStart(t *testing.T) {
	store := raft.NewInmemStore()
	for i := range uint64(2) {
		if err := store.StoreLog(&raft.Log{Index: i + 1, Term: 1, Type: raft.LogCommand, Data: []byte{entryCommand}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	rc := raft.DefaultConfig()
	rc.LocalID = "n1"
	rc.Logger = newHCLogger(slog.New(slog.DiscardHandler), nil)
	n := mutex.NewNode(mutex.NodeConfig{})
	defer n.Close()
	_, err := newRaft(rc, newFSM(n, slog.New(slog.DiscardHandler)), brokenLogs{store}, store, raft.NewInmemSnapshotStore(), trans)
	if !errors.Is(err, ErrDamagedLog) || !strings.Contains(err.Error(), "short buffer") {
		t.Fatalf("newRaft: %v, want ErrDamagedLog", err)
	}
}

// tree lists the paths under dir, nil when dir does not exist.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, rel)
		return err
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A Start that fails leaves the raft directory as it found it: on a raft
// port that another holds, and when raft refuses the bootstrap after the
// store was created. A start on the other store then works, and a
// failed start leaves that store's files as they were.
func TestFailedStartLeavesTheDirectory(t *testing.T) {
	for _, ls := range logStores {
		t.Run(string(ls), func(t *testing.T) {
			other := LogStoreWAL
			if ls == LogStoreWAL {
				other = LogStoreBoltDB
			}
			held, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			// start starts a node and stops it again.
			start := func(dir string, ls LogStore, ln net.Listener, peers ...string) error {
				t.Helper()
				bind := held.Addr().String()
				if ln != nil {
					bind = ln.Addr().String()
				}
				cfg := Config{NodeID: "n1", RaftBind: bind, RaftListener: ln, Dir: dir, LogStore: ls,
					ClientAddress: "client-n1:1", ElectionTimeout: testElection, Logger: testLogger(t)}
				for _, id := range peers {
					cfg.Peers = append(cfg.Peers, Peer{ID: id, RaftAddress: bind})
				}
				c, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				n := mutex.NewNode(mutex.NodeConfig{Replicator: c})
				err = c.Start(n)
				c.Close()
				n.Close()
				return err
			}
			free := func() net.Listener {
				t.Helper()
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				return ln
			}
			unchanged := func(what, dir string, before []string) {
				t.Helper()
				if got := tree(t, dir); !slices.Equal(got, before) {
					t.Errorf("%s: %s holds %q, before %q", what, dir, got, before)
				}
			}

			absent := filepath.Join(t.TempDir(), "raft")
			if err := start(absent, ls, nil); err == nil {
				t.Fatal("a start on a raft port another holds worked")
			}
			unchanged("port taken, no directory", absent, nil)
			empty := t.TempDir()
			if err := start(empty, ls, nil); err == nil {
				t.Fatal("a start on a raft port another holds worked")
			}
			unchanged("port taken, an empty directory", empty, []string{"."})
			if err := start(absent, ls, free(), "n1", "n2"); err == nil {
				t.Fatal("a bootstrap of two peers at one raft address started")
			}
			unchanged("bootstrap refused", absent, nil)

			if err := start(empty, other, free(), "n1"); err != nil {
				t.Fatalf("the other store after the failed starts: %v", err)
			}
			before := tree(t, empty)
			if err := start(empty, other, nil); err == nil {
				t.Fatal("a start on a raft port another holds worked")
			}
			unchanged("port taken, a store", empty, before)
		})
	}
}

// A leader is ready while it leads in the term it took over in and a
// quorum confirms it; a follower never is; and without a quorum the
// leader stops being ready.
func TestReadyOnlyWhereTheNodeLeads(t *testing.T) {
	nodes := newTestCluster(t, 3)
	lead := awaitLeader(t, nodes)
	if !lead.c.Ready() || !lead.c.Status(false).Ready || !lead.c.Report(t.Context(), false).Ready {
		t.Fatal("the leader is not ready")
	}
	for _, tn := range nodes {
		if tn != lead && (tn.c.Ready() || tn.c.Status(false).Ready || tn.c.Report(t.Context(), false).Ready) {
			t.Fatalf("follower %s is ready", tn.id)
		}
	}
	// Raft in a term other than the one whose restart this node applied
	// (it heard of a newer term before its leadership watch did): not
	// ready, whatever the flag says.
	term := lead.c.readyTerm.Load()
	lead.c.readyTerm.Store(term - 1)
	if lead.c.Status(false).Ready || lead.c.Ready() {
		t.Fatal("a leader of another term than its restart's is ready")
	}
	lead.c.readyTerm.Store(term)
	for _, tn := range nodes {
		if tn != lead {
			tn.stop()
		}
	}
	// A confirmation may still come from an answer the followers sent
	// before they stopped; none comes after, and raft steps down.
	eventually(t, "the leader without a quorum is not ready", func() bool { return !lead.c.Ready() })
	if lead.c.Report(t.Context(), false).Ready {
		t.Fatal("GET /cluster would show a leader without a quorum ready")
	}
}
