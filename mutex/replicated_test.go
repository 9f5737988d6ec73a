package mutex

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeLog is a replicated log in memory: one ordered list of commands
// that one goroutine applies to every node, as raft's FSM would.
type fakeLog struct {
	mu      sync.Mutex
	nodes   []*Node
	leader  int
	entries []Command
	applied []chan struct{} // closed once entry i applied on every node
	work    chan int
	done    chan struct{}
}

func newFakeLog(t *testing.T, n int, clock func() time.Time) *fakeLog {
	l := &fakeLog{work: make(chan int, 1024), done: make(chan struct{})}
	for i := range n {
		l.nodes = append(l.nodes, NewNode(NodeConfig{Clock: clock, Replicator: fakeRep{l, i}}))
	}
	l.start(t)
	return l
}

// start applies the entries to l's nodes until the test ends, and closes
// the nodes then.
func (l *fakeLog) start(t *testing.T) {
	go func() {
		defer close(l.done)
		for i := range l.work {
			l.mu.Lock()
			c := l.entries[i]
			ch := l.applied[i]
			l.mu.Unlock()
			for _, n := range l.nodes {
				cc := c
				n.ApplyCommitted(&cc, uint64(i+1))
			}
			close(ch)
		}
	}()
	t.Cleanup(func() {
		close(l.work)
		<-l.done
		for _, n := range l.nodes {
			n.Close()
		}
	})
}

// elect makes node i the leader.
func (l *fakeLog) elect(i int) {
	l.mu.Lock()
	old := l.leader
	l.leader = i
	l.mu.Unlock()
	l.nodes[old].SetLeader(false)
	l.nodes[i].SetLeader(true)
}

type fakeRep struct {
	l *fakeLog
	i int
}

func (r fakeRep) Propose(c *Command) func() error {
	l := r.l
	l.mu.Lock()
	if l.leader != r.i {
		l.mu.Unlock()
		return func() error { return ErrNotLeader }
	}
	l.entries = append(l.entries, *c)
	ch := make(chan struct{})
	l.applied = append(l.applied, ch)
	i := len(l.entries) - 1
	l.mu.Unlock()
	l.work <- i
	return func() error { <-ch; return nil }
}

func (r fakeRep) VerifyLeader() error {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if r.l.leader != r.i {
		return ErrNotLeader
	}
	return nil
}

func (r fakeRep) Linearize() error { return r.VerifyLeader() }

func (r fakeRep) Leader() string { return "node-leader" }

// Three nodes fed by one log hold the same table; tokens follow the log's
// positions; a follower refuses to change the table; a new leader gives
// sessions a fresh TTL and withdraws what waited on the old leader's
// connections.
func TestReplicatedNodes(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	l := newFakeLog(t, 3, clk.Now)
	l.elect(0)
	lead := l.nodes[0]
	g, _, err := lead.TryLock(Claim{Key: "k", Source: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Token>>TokenShift == 0 || g.Token&(1<<TokenShift-1) != 1 {
		t.Fatalf("token %#x, want the entry's position shifted, plus one", g.Token)
	}
	if res, _ := l.nodes[1].Apply(Command{Op: OpAcquire, Key: "x", Try: true}); res.Status != StatusUnavailable {
		t.Fatalf("a follower applied a command: %v", res.Status)
	}
	r := &route{}
	sess, res, _ := lead.OpenSession("s", 10*time.Second, [SecretHashLen]byte{}, "", r)
	if sess == nil {
		t.Fatalf("open session: %v", res.Status)
	}
	if res, _, _ := lead.ApplySession(Command{Op: OpAcquire, Session: sess.ID(), Request: 1, Key: "k"}); res.Status != StatusParked {
		t.Fatalf("session acquire: %v", res.Status)
	}
	woke := make(chan Event, 1)
	if res, _ := lead.ApplyWake(Command{Op: OpAcquire, Key: "k", Source: "v1b", ConnBound: true}, func(ev Event, _ Pending) { woke <- ev }); res.Status != StatusParked {
		t.Fatalf("v1 acquire: %v", res.Status)
	}
	if _, err := lead.Release("k"); err != nil {
		t.Fatal(err)
	}
	if ev := r.events(); !slices.Equal(ev, []EventKind{EventGranted}) {
		t.Fatalf("session events %v", ev)
	}
	same := func() {
		t.Helper()
		var want []Record
		lead.Export(func(r *Record) { want = append(want, *r) })
		for i, n := range l.nodes[1:] {
			var got []Record
			n.Export(func(r *Record) { got = append(got, *r) })
			if !slices.Equal(got, want) {
				t.Fatalf("node %d differs from the leader:\n%+v\n%+v", i+1, got, want)
			}
		}
	}
	same()

	// Node 1 takes over. The v1 request waited on node 0's connection:
	// the new leader's restart withdraws it; the session lives on with a
	// fresh TTL.
	clk.add(9 * time.Second)
	l.elect(1)
	if ev := <-woke; ev.Kind != EventWithdrawn || ev.Reason != ReasonRestart {
		t.Fatalf("the old leader's v1 waiter: %+v", ev)
	}
	clk.add(9 * time.Second) // 18 s since the session was heard from, 9 s since the election
	l.nodes[1].Advance()
	if s := l.nodes[1].Snapshot(); len(s.Sessions) != 1 {
		t.Fatal("the session expired early through the failover")
	}
	clk.add(2 * time.Second)
	l.nodes[1].Advance()
	if s := l.nodes[1].Snapshot(); len(s.Sessions) != 0 || s.Counters.SessionExpiries != 1 {
		t.Fatalf("sessions %+v after the new leader's TTL", s.Sessions)
	}
	lead = l.nodes[1]
	same()
	g2, _, err := lead.TryLock(Claim{Key: "k", Source: "v1"})
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("token %d after %d (%v)", g2.Token, g.Token, err)
	}
}

// A node that stops being the leader tells its parked v1 requests at once
// that they were withdrawn, without waiting for a new leader's restart:
// their clients ask again elsewhere.
func TestReplicatedStepDownWithdrawsWaiters(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	l := newFakeLog(t, 3, clk.Now)
	l.elect(0)
	lead := l.nodes[0]
	if _, _, err := lead.TryLock(Claim{Key: "k", Source: "a"}); err != nil {
		t.Fatal(err)
	}
	woke := make(chan Event, 1)
	if res, _ := lead.ApplyWake(Command{Op: OpAcquire, Key: "k", Source: "b", ConnBound: true},
		func(ev Event, _ Pending) { woke <- ev }); res.Status != StatusParked {
		t.Fatalf("acquire: %v", res.Status)
	}
	if !lead.IsLeader() {
		t.Fatal("the leader says it is not")
	}
	lead.SetLeader(false)
	if lead.IsLeader() {
		t.Fatal("a node that stepped down says it leads")
	}
	select {
	case ev := <-woke:
		if ev.Kind != EventWithdrawn || ev.Reason != ReasonRestart {
			t.Fatalf("the parked request heard %+v", ev)
		}
	default:
		t.Fatal("the parked request was not told when its node stepped down")
	}
	if res, _ := lead.Apply(Command{Op: OpRelease, Key: "k"}); res.Status != StatusUnavailable {
		t.Fatalf("a node that stepped down applied a release: %v", res.Status)
	}
}

// heldRep holds back the commit of the first command that hold picks
// (by default an acquire of source "held") until release closes, and
// tells proposed when it has one; the commands after it commit before it.
type heldRep struct {
	fakeRep
	proposed chan struct{}
	release  chan struct{}
	hold     func(*Command) bool
}

func (r heldRep) Propose(c *Command) func() error {
	hold := r.hold
	if hold == nil {
		hold = func(c *Command) bool { return c.Op == OpAcquire && c.Source == "held" }
	}
	if !hold(c) {
		return r.fakeRep.Propose(c)
	}
	l := r.l
	l.mu.Lock()
	l.entries = append(l.entries, *c)
	ch := make(chan struct{})
	l.applied = append(l.applied, ch)
	i := len(l.entries) - 1
	l.mu.Unlock()
	close(r.proposed)
	return func() error {
		<-r.release
		l.work <- i
		<-ch
		return nil
	}
}

// An acquire proposed before its node stepped down and applied after it
// parks, and is withdrawn at once: the wakes of SetLeader(false) are
// gone, and a node removed from its cluster applies no later restart.
func TestReplicatedParkedAfterStepDown(t *testing.T) {
	l := &fakeLog{work: make(chan int, 16), done: make(chan struct{})}
	rep := heldRep{fakeRep{l, 0}, make(chan struct{}), make(chan struct{}), nil}
	n := NewNode(NodeConfig{Replicator: rep})
	l.nodes = []*Node{n}
	l.start(t)
	n.SetLeader(true)
	if _, _, err := n.TryLock(Claim{Key: "k", Source: "a"}); err != nil {
		t.Fatal(err)
	}
	woke := make(chan Event, 1)
	parked := make(chan Status, 1)
	go func() {
		res, _ := n.ApplyWake(Command{Op: OpAcquire, Key: "k", Source: "held", ConnBound: true},
			func(ev Event, _ Pending) { woke <- ev })
		parked <- res.Status
	}()
	<-rep.proposed
	n.SetLeader(false)
	close(rep.release)
	if st := <-parked; st != StatusParked {
		t.Fatalf("the acquire: %v", st)
	}
	select {
	case ev := <-woke:
		if ev.Kind != EventWithdrawn || ev.Reason != ReasonRestart {
			t.Fatalf("the parked request heard %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request parked after its node stepped down was never woken")
	}
}

// orderRep records the op of every command proposed while it is the
// leader, ahead of the fake log.
type orderRep struct {
	fakeRep
	mu  *sync.Mutex
	ops *[]Op
}

func (r orderRep) Propose(c *Command) func() error {
	r.mu.Lock()
	*r.ops = append(*r.ops, c.Op)
	r.mu.Unlock()
	return r.fakeRep.Propose(c)
}

// However busy its clients are, a new leader's first proposal is its
// restart: nothing of the new term is applied before it.
func TestReplicatedRestartGoesFirst(t *testing.T) {
	l := &fakeLog{work: make(chan int, 1<<16), done: make(chan struct{})}
	var mu sync.Mutex
	var ops []Op
	n := NewNode(NodeConfig{Replicator: orderRep{fakeRep{l, 0}, &mu, &ops}})
	l.nodes = []*Node{n}
	l.start(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n.Apply(Command{Op: OpAcquire, Key: "k", Source: "s", Try: true})
				n.Apply(Command{Op: OpRelease, Key: "k"})
			}
		})
	}
	for round := range 50 {
		mu.Lock()
		ops = ops[:0]
		mu.Unlock()
		n.SetLeader(true)
		mu.Lock()
		first := Op(0)
		if len(ops) > 0 {
			first = ops[0]
		}
		mu.Unlock()
		if first != OpRestart {
			close(stop)
			wg.Wait()
			t.Fatalf("round %d: the new leader's first proposal was %v", round, first)
		}
		n.SetLeader(false)
	}
	close(stop)
	wg.Wait()
}

// A v1 unlock or reset that commits late (held up in a paused leader, or
// in flight through a failover) ends only the grants that existed when
// its node received it: a grant made meanwhile stays with its holder.
func TestReplicatedLateUnlockEndsNoNewerGrant(t *testing.T) {
	for _, late := range []Command{
		{Op: OpRelease, Key: "k"},
		{Op: OpResetKey, Key: "k"},
		{Op: OpResetSource, Source: "a"},
	} {
		t.Run(late.Op.String(), func(t *testing.T) {
			l := &fakeLog{work: make(chan int, 16), done: make(chan struct{})}
			held := false // only the first: the same request sent again commits at once
			rep := heldRep{fakeRep{l, 0}, make(chan struct{}), make(chan struct{}),
				func(c *Command) bool {
					hold := !held && c.Op == late.Op
					held = held || hold
					return hold
				}}
			n := NewNode(NodeConfig{Replicator: rep})
			l.nodes = []*Node{n}
			l.start(t)
			n.SetLeader(true)
			first, _, err := n.TryLock(Claim{Key: "k", Source: "a"})
			if err != nil {
				t.Fatal(err)
			}
			result := make(chan Result, 1)
			go func() { res, _ := n.Apply(late); result <- res }()
			<-rep.proposed // stamped and on its way, not committed
			// Meanwhile the client gave up on it, took the key from its old
			// grant with a reset of its own, and locked it again.
			if res, _ := n.Apply(Command{Op: OpRevoke, Key: "k", Token: first.Token}); res.Status != StatusOK {
				t.Fatalf("revoke of the first grant: %v", res.Status)
			}
			second, _, err := n.TryLock(Claim{Key: "k", Source: "a"})
			if err != nil {
				t.Fatal(err)
			}
			close(rep.release)
			res := <-result
			if late.Op == OpRelease && res.Status != StatusStale {
				t.Errorf("the late unlock: %v, want %v", res.Status, StatusStale)
			}
			h, ok := n.Holder("k")
			if !ok || h.Token != second.Token {
				t.Fatalf("after the late %v the key is held by %+v (held %v), want the newer grant %d",
					late.Op, h, ok, second.Token)
			}
			// Sent now, the same request ends the grant it now sees.
			if res, _ := n.Apply(late); late.Op == OpRelease && res.Status != StatusOK {
				t.Fatalf("an unlock of the current grant: %v", res.Status)
			}
			if h, ok := n.Holder("k"); ok {
				t.Fatalf("after a %v of the current grant the key is held by %+v", late.Op, h)
			}
		})
	}
}
