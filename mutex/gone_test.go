package mutex

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// watched is a parked v1 request of a test, with the probe of its client
// that the test sets.
type watched struct {
	ticket uint64
	left   atomic.Bool  // what its probe answers
	asked  atomic.Int32 // how often its probe was asked
	mu     sync.Mutex
	woke   []Event
}

func (w *watched) gone() bool {
	w.asked.Add(1)
	return w.left.Load()
}

func (w *watched) wake(ev Event, _ Pending) {
	w.mu.Lock()
	w.woke = append(w.woke, ev)
	w.mu.Unlock()
}

// outcome returns how the wait ended; ok is false while it has not.
func (w *watched) outcome() (ev Event, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.woke) != 1 {
		return Event{}, false
	}
	return w.woke[0], true
}

// parkWatched parks a v1 lock of key by source on n, watched.
func parkWatched(t *testing.T, n *Node, key, source string) *watched {
	t.Helper()
	w := &watched{}
	res, _ := n.ApplyWatched(Command{Op: OpAcquire, Key: key, Source: source, ConnBound: true}, w.wake, w.gone)
	if res.Status != StatusParked {
		t.Fatalf("%s's lock of %s: %v", source, key, res.Status)
	}
	w.ticket = res.Ticket
	return w
}

// mustBeWithdrawn fails t unless w was withdrawn because its client left.
func (w *watched) mustBeWithdrawn(t *testing.T) {
	t.Helper()
	if ev, ok := w.outcome(); !ok || ev.Kind != EventWithdrawn || ev.Reason != ReasonCancelled {
		t.Fatalf("the departed waiter heard %+v, want a withdrawal (cancelled)", w.woke)
	}
}

// mustBeGranted fails t unless w was granted token.
func (w *watched) mustBeGranted(t *testing.T, token uint64) {
	t.Helper()
	if ev, ok := w.outcome(); !ok || ev.Kind != EventGranted || ev.Token != token {
		t.Fatalf("the next waiter heard %+v, want its grant of token %d", w.woke, token)
	}
}

// cmdJournal keeps a copy of every command it is given.
type cmdJournal struct {
	mu   sync.Mutex
	cmds []Command
}

func (j *cmdJournal) Append(c *Command) Pending {
	j.mu.Lock()
	j.cmds = append(j.cmds, *c)
	j.mu.Unlock()
	return nil
}

func (j *cmdJournal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.cmds)
}

// since returns the commands from the i-th on.
func (j *cmdJournal) since(i int) []Command {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.cmds[i:])
}

// replay applies every command of j to an empty table.
func (j *cmdJournal) replay() *Table {
	t := NewTable()
	for _, c := range j.since(0) {
		t.Apply(&c)
	}
	return t
}

func records(export func(func(*Record))) []Record {
	var out []Record
	export(func(r *Record) { out = append(out, *r) })
	return out
}

// Whatever passes a key on (an unlock, a revoke, a reset by key or by
// source, a session's close or expiry, a lease's or a lock-delay's end),
// a waiter first in line whose client has left is withdrawn first, by a
// cancel journalled before the command, and the next waiter gets the key
// with the very next fencing token. A replay of the journal reaches the
// same table.
func TestNodeWithdrawsDepartedWaiters(t *testing.T) {
	const ttl, lease, delay = 10 * time.Second, 5 * time.Second, time.Second
	v1 := func(t *testing.T, n *Node, _ *fakeClock) uint64 {
		g, _, err := n.TryLock(Claim{Key: "k", Source: "holder"})
		if err != nil {
			t.Fatal(err)
		}
		return g.Token
	}
	var sess uint64 // the holding session of a case
	inSession := func(c Command) func(t *testing.T, n *Node, _ *fakeClock) uint64 {
		return func(t *testing.T, n *Node, _ *fakeClock) uint64 {
			l, _, _ := n.OpenSession("holder", ttl, [SecretHashLen]byte{}, "", &route{})
			sess = l.ID()
			c.Op, c.Session, c.Request, c.Key = OpAcquire, sess, 1, "k"
			res, _, _ := n.ApplySession(c)
			if res.Status != StatusGranted {
				t.Fatalf("session acquire: %v", res.Status)
			}
			return res.Token
		}
	}
	advance := func(d time.Duration) func(*testing.T, *Node, *fakeClock, uint64) {
		return func(_ *testing.T, n *Node, clk *fakeClock, _ uint64) {
			clk.add(d)
			n.Advance()
		}
	}
	cases := []struct {
		name string
		hold func(t *testing.T, n *Node, clk *fakeClock) (token uint64)
		pass func(t *testing.T, n *Node, clk *fakeClock, token uint64)
		op   Op
	}{
		{"unlock", v1, func(_ *testing.T, n *Node, _ *fakeClock, _ uint64) { n.Release("k") }, OpRelease},
		{"revoke", v1, func(_ *testing.T, n *Node, _ *fakeClock, token uint64) { n.Revoke("k", token) }, OpRevoke},
		{"reset key", v1, func(_ *testing.T, n *Node, _ *fakeClock, _ uint64) { n.ResetKey("k") }, OpResetKey},
		{"reset source", v1, func(_ *testing.T, n *Node, _ *fakeClock, _ uint64) { n.ResetSource("holder") }, OpResetSource},
		{"session closed", inSession(Command{}), func(_ *testing.T, n *Node, _ *fakeClock, _ uint64) {
			n.ApplySession(Command{Op: OpCloseSession, Session: sess, Request: 2})
		}, OpCloseSession},
		{"session expired", inSession(Command{}), advance(ttl + time.Second), OpExpireSession},
		{"lease ended", inSession(Command{Lease: lease}), advance(lease), OpTick},
		{"lock-delay ended", func(t *testing.T, n *Node, clk *fakeClock) uint64 {
			token := inSession(Command{Lease: lease, Delay: delay})(t, n, clk)
			advance(lease)(t, n, clk, token) // the lease ends: the key is in lock-delay
			return token
		}, advance(delay), OpTick},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
			j := &cmdJournal{}
			n := NewNode(NodeConfig{Clock: clk.Now, Journal: j})
			defer n.Close()
			token := tc.hold(t, n, clk)
			departs := parkWatched(t, n, "k", "departs")
			next := parkWatched(t, n, "k", "next")
			departs.left.Store(true)
			from := j.len()
			tc.pass(t, n, clk, token)
			departs.mustBeWithdrawn(t)
			next.mustBeGranted(t, token+1)
			cmds := j.since(from)
			if len(cmds) != 2 || cmds[0].Op != OpCancel || cmds[0].Ticket != departs.ticket || cmds[1].Op != tc.op {
				t.Fatalf("journalled %+v, want the cancel of ticket %d, then %v", cmds, departs.ticket, tc.op)
			}
			if got, want := records(j.replay().Export), records(n.Export); !slices.Equal(got, want) {
				t.Fatalf("the replay differs:\n%+v\n%+v", got, want)
			}
		})
	}
}

// Only the requests a command would grant are asked about, and only when
// the command may pass their key on: a departed waiter behind a live one
// waits for its own cancel, or its turn; one that a shared grant passes
// over is not asked either.
func TestNodeAsksOnlyWhoWouldBeGranted(t *testing.T) {
	n := NewNode(NodeConfig{})
	defer n.Close()
	if _, _, err := n.TryLock(Claim{Key: "k", Source: "holder"}); err != nil {
		t.Fatal(err)
	}
	first := parkWatched(t, n, "k", "first")
	departs := parkWatched(t, n, "k", "departs")
	departs.left.Store(true)
	n.TryLock(Claim{Key: "other", Source: "a"})
	n.Release("other")
	n.ResetKey("free")
	if a, b := first.asked.Load(), departs.asked.Load(); a != 0 || b != 0 {
		t.Fatalf("commands on other keys asked %d and %d times", a, b)
	}
	n.Release("k")
	if a, b := first.asked.Load(), departs.asked.Load(); a != 1 || b != 0 {
		t.Fatalf("the release asked the first %d times and the one behind it %d, want 1 and 0", a, b)
	}
	ev, _ := first.outcome()
	n.Release("k") // first's turn ends: departs' comes, and it is gone
	departs.mustBeWithdrawn(t)
	if n.Len() != 0 {
		t.Fatalf("the key is still there: %+v", n.Describe("k"))
	}

	// A session's shared request first: a v1 request behind it does not
	// fit beside it.
	if _, _, err := n.TryLock(Claim{Key: "k", Source: "holder"}); err != nil {
		t.Fatal(err)
	}
	l, _, _ := n.OpenSession("reader", time.Minute, [SecretHashLen]byte{}, "", &route{})
	if res, _, _ := n.ApplySession(Command{Op: OpAcquire, Session: l.ID(), Request: 1, Key: "k", Mode: Shared}); res.Status != StatusParked {
		t.Fatalf("shared acquire: %v", res.Status)
	}
	behind := parkWatched(t, n, "k", "behind")
	behind.left.Store(true)
	n.Release("k")
	if got := behind.asked.Load(); got != 0 {
		t.Fatalf("a request the shared grant passed over was asked %d times", got)
	}
	if h, ok := n.Holder("k"); !ok || h.Session != l.ID() || h.Token <= ev.Token {
		t.Fatalf("holder %+v, want the reader", h)
	}
}

// An in-process Lock whose context has ended is withdrawn before the key
// is passed on, whichever comes first, its own cancel or the release: the
// next waiter gets the key with the next token.
func TestNodeLockGivenUpIsNotGranted(t *testing.T) {
	n := NewNode(NodeConfig{})
	defer n.Close()
	g, _, err := n.TryLock(Claim{Key: "k", Source: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := lockParked(ctx, n, Claim{Key: "k", Source: "gives-up"})
	next := parkWatched(t, n, "k", "next")
	cancel()
	n.Release("k")
	next.mustBeGranted(t, g.Token+1)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the lock given up: %v", err)
	}
}

// A leader proposes the cancel of a departed waiter before the command
// that would have granted it: every node applies both, in that order, and
// none grants it.
func TestReplicatedWithdrawsDepartedWaiters(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	l := newFakeLog(t, 2, clk.Now)
	l.elect(0)
	lead, follower := l.nodes[0], l.nodes[1]
	if _, _, err := lead.TryLock(Claim{Key: "k", Source: "holder"}); err != nil {
		t.Fatal(err)
	}
	departs := parkWatched(t, lead, "k", "departs")
	next := parkWatched(t, lead, "k", "next")
	var mu sync.Mutex
	var seen []Event
	stop := follower.Observe(func(ev Event) {
		mu.Lock()
		seen = append(seen, ev)
		mu.Unlock()
	})
	defer stop()
	departs.left.Store(true)
	l.mu.Lock()
	from := len(l.entries)
	l.mu.Unlock()
	if _, err := lead.Release("k"); err != nil {
		t.Fatal(err)
	}
	departs.mustBeWithdrawn(t)
	if ev, ok := next.outcome(); !ok || ev.Kind != EventGranted {
		t.Fatalf("the next waiter heard %+v", next.woke)
	}
	l.mu.Lock()
	entries := slices.Clone(l.entries[from:])
	l.mu.Unlock()
	if len(entries) != 2 || entries[0].Op != OpCancel || entries[0].Ticket != departs.ticket || entries[1].Op != OpRelease {
		t.Fatalf("proposed %+v, want the cancel of ticket %d, then the release", entries, departs.ticket)
	}
	mu.Lock()
	defer mu.Unlock()
	kinds := make([]EventKind, 0, len(seen))
	for _, ev := range seen {
		kinds = append(kinds, ev.Kind)
	}
	if want := []EventKind{EventWithdrawn, EventReleased, EventGranted}; !slices.Equal(kinds, want) {
		t.Fatalf("the follower's events %v, want %v", kinds, want)
	}
	if got, want := records(follower.Export), records(lead.Export); !slices.Equal(got, want) {
		t.Fatalf("the follower differs from the leader:\n%+v\n%+v", got, want)
	}
}
