package mutex

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// bench is a table driven by hand, with a clock the test moves.
type bench struct {
	t   *testing.T
	tab *Table
	now time.Time
	req map[uint64]uint64 // the last request id used per session
}

func newBench(t *testing.T) *bench {
	return &bench{t: t, tab: NewTable(), now: time.Unix(1_700_000_000, 0), req: map[uint64]uint64{}}
}

func (b *bench) apply(c Command) Result {
	b.t.Helper()
	c.At = b.now
	if c.Session != 0 && c.Request == 0 && c.Op != OpExpireSession {
		b.req[c.Session]++
		c.Request = b.req[c.Session]
	}
	return b.tab.Apply(&c)
}

func (b *bench) advance(d time.Duration) []Event {
	b.t.Helper()
	b.now = b.now.Add(d)
	b.tab.TakeEvents()
	b.apply(Command{Op: OpTick})
	return slices.Clone(b.tab.TakeEvents())
}

func (b *bench) events() []Event { return slices.Clone(b.tab.TakeEvents()) }

func (b *bench) open(name string) uint64 {
	b.t.Helper()
	r := b.apply(Command{Op: OpOpenSession, Source: name, TTL: 10 * time.Second})
	if r.Status != StatusOK || r.Session == 0 {
		b.t.Fatalf("open session: %+v", r)
	}
	return r.Session
}

func (b *bench) v1(key, source string) Result {
	b.t.Helper()
	return b.apply(Command{Op: OpAcquire, Key: key, Source: source, ConnBound: true})
}

func (b *bench) want(r Result, s Status) Result {
	b.t.Helper()
	if r.Status != s {
		b.t.Fatalf("status %v, want %v (%+v)", r.Status, s, r)
	}
	return r
}

func (b *bench) holders(key string) []Holder {
	return b.tab.describe(key, b.now).Holders
}

func (b *bench) holderTokens(key string) []uint64 {
	var out []uint64
	for _, h := range b.holders(key) {
		out = append(out, h.Token)
	}
	return out
}

// grantedTickets returns the tickets of the EventGranted events in evs, in order.
func grantedTickets(evs []Event) []uint64 {
	var out []uint64
	for _, ev := range evs {
		if ev.Kind == EventGranted && ev.Parked {
			out = append(out, ev.Ticket)
		}
	}
	return out
}

func TestV1FIFOAndNoCredit(t *testing.T) {
	b := newBench(t)
	first := b.want(b.v1("k", "a"), StatusGranted)
	var tickets []uint64
	for i := range 50 {
		r := b.want(b.v1("k", fmt.Sprint("w", i)), StatusParked)
		tickets = append(tickets, r.Ticket)
	}
	b.events()
	var order []uint64
	last := first.Token
	for range 50 {
		r := b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusOK)
		if r.Token != last {
			t.Fatalf("released token %d, want %d", r.Token, last)
		}
		evs := b.events()
		g := grantedTickets(evs)
		if len(g) != 1 {
			t.Fatalf("one release granted %v", evs)
		}
		order = append(order, g[0])
		for _, ev := range evs {
			if ev.Kind == EventGranted {
				if ev.Token <= last {
					t.Fatalf("token %d after %d", ev.Token, last)
				}
				last = ev.Token
			}
		}
	}
	if !slices.Equal(order, tickets) {
		t.Fatalf("grant order %v, want %v", order, tickets)
	}
	b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusOK)
	// An unlock of a free key stores no credit.
	if r := b.apply(Command{Op: OpRelease, Key: "k"}); r.Changed {
		t.Fatal("release of a free key changed the table")
	}
	b.want(b.v1("k", "x"), StatusGranted)
	b.want(b.v1("k", "y"), StatusParked)
	if b.tab.Len() != 1 {
		t.Fatalf("%d keys", b.tab.Len())
	}
	// Keys that share a prefix are distinct.
	for _, k := range []string{"k/", "K", "k\x00"} {
		b.want(b.v1(k, "z"), StatusGranted)
	}
}

func TestV1TryAndResets(t *testing.T) {
	b := newBench(t)
	b.want(b.apply(Command{Op: OpAcquire, Key: "k", Source: "a", Try: true}), StatusGranted)
	b.want(b.apply(Command{Op: OpAcquire, Key: "k", Source: "b", Try: true}), StatusBusy)
	w1 := b.want(b.v1("k", "b"), StatusParked)
	w2 := b.want(b.v1("k", "c"), StatusParked)
	b.want(b.v1("other", "b"), StatusGranted)
	b.want(b.v1("other", "c"), StatusParked)
	b.events()
	// Reset by source withdraws b's waiter and releases b's key; the queue
	// of "other" passes on to c.
	b.want(b.apply(Command{Op: OpResetSource, Source: "b"}), StatusOK)
	evs := b.events()
	var withdrawn []uint64
	for _, ev := range evs {
		if ev.Kind == EventWithdrawn {
			withdrawn = append(withdrawn, ev.Ticket)
		}
	}
	if !slices.Equal(withdrawn, []uint64{w1.Ticket}) {
		t.Fatalf("withdrawn %v, want [%d]", withdrawn, w1.Ticket)
	}
	if h := b.holders("other"); len(h) != 1 || h[0].Source != "c" {
		t.Fatalf("other held by %+v", h)
	}
	// Reset by key passes k to its first waiter.
	b.want(b.apply(Command{Op: OpResetKey, Key: "k"}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{w2.Ticket}) {
		t.Fatalf("reset key granted %v", g)
	}
}

func TestSessionLocksAndTokens(t *testing.T) {
	b := newBench(t)
	s := b.open("svc")
	g := b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "k"}), StatusGranted)
	// v1 cannot release a session's key.
	b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusNotOwned)
	// A stale token changes nothing.
	b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: g.Token + 1}), StatusStale)
	other := b.open("other")
	b.want(b.apply(Command{Op: OpRelease, Session: other, Key: "k", Token: g.Token}), StatusStale)
	if len(b.holders("k")) != 1 {
		t.Fatal("a stale release took the key")
	}
	// A request id at or below the highest applied is a duplicate.
	b.want(b.apply(Command{Op: OpAcquire, Session: s, Request: 1, Key: "z", Try: true}), StatusDuplicate)
	b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: g.Token}), StatusOK)
	if len(b.holders("k")) != 0 || b.tab.Len() != 0 {
		t.Fatal("release left the key held")
	}
	// A later v1 grant has a greater token.
	v := b.want(b.v1("k", "v1"), StatusGranted)
	if v.Token <= g.Token {
		t.Fatalf("token %d after %d", v.Token, g.Token)
	}
	// One FIFO queue for v1 and sessions.
	p1 := b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "k"}), StatusParked)
	p2 := b.want(b.v1("k", "v1b"), StatusParked)
	p3 := b.want(b.apply(Command{Op: OpAcquire, Session: other, Key: "k"}), StatusParked)
	b.events()
	var order []uint64
	b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusOK)
	order = append(order, grantedTickets(b.events())...)
	b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: b.holderTokens("k")[0]}), StatusOK)
	order = append(order, grantedTickets(b.events())...)
	b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusOK)
	order = append(order, grantedTickets(b.events())...)
	if want := []uint64{p1.Ticket, p2.Ticket, p3.Ticket}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

func TestSessionExpiryLockDelayAndWithdrawal(t *testing.T) {
	b := newBench(t)
	s := b.open("dies")
	g := b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "k", Delay: 3 * time.Second}), StatusGranted)
	b.want(b.v1("x", "v1"), StatusGranted)
	p := b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "x"}), StatusParked)
	w := b.want(b.v1("k", "next"), StatusParked)
	b.events()
	b.want(b.apply(Command{Op: OpExpireSession, Session: s}), StatusOK)
	evs := b.events()
	var lost, withdrawn bool
	for _, ev := range evs {
		switch {
		case ev.Kind == EventLost && ev.Token == g.Token && ev.Reason == ReasonSessionExpired:
			lost = true
		case ev.Kind == EventWithdrawn && ev.Ticket == p.Ticket && ev.Reason == ReasonSessionExpired:
			withdrawn = true
		case ev.Kind == EventGranted:
			t.Fatalf("granted during the lock-delay: %+v", ev)
		}
	}
	if !lost || !withdrawn {
		t.Fatalf("events %+v", evs)
	}
	// Nobody gets k for the lock-delay, and a try is busy.
	b.want(b.apply(Command{Op: OpAcquire, Key: "k", Source: "try", Try: true}), StatusBusy)
	if g := grantedTickets(b.advance(2999 * time.Millisecond)); len(g) != 0 {
		t.Fatalf("granted before the delay ended: %v", g)
	}
	if g := grantedTickets(b.advance(time.Millisecond)); !slices.Equal(g, []uint64{w.Ticket}) {
		t.Fatalf("at the delay's end granted %v, want [%d]", g, w.Ticket)
	}
	// The session is gone.
	b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "y"}), StatusNoSession)
}

func TestCloseReleasesWithoutDelayAndResetClearsDelay(t *testing.T) {
	b := newBench(t)
	s := b.open("a")
	b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "k", Delay: time.Minute}), StatusGranted)
	w := b.want(b.v1("k", "w"), StatusParked)
	b.events()
	b.want(b.apply(Command{Op: OpCloseSession, Session: s}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{w.Ticket}) {
		t.Fatalf("close granted %v", g)
	}
	s2 := b.open("b")
	b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusOK)
	b.want(b.apply(Command{Op: OpAcquire, Session: s2, Key: "k", Lease: time.Second, Delay: time.Minute}), StatusGranted)
	w2 := b.want(b.v1("k", "w2"), StatusParked)
	b.advance(time.Second) // the lease runs out: the delay starts
	b.want(b.apply(Command{Op: OpAcquire, Key: "k", Source: "try", Try: true}), StatusBusy)
	b.want(b.apply(Command{Op: OpResetKey, Key: "k"}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{w2.Ticket}) {
		t.Fatalf("reset during the delay granted %v", g)
	}
}

// A lock its client gave up at its own end of the lease (a release with
// Lapse) ends as the lease running out would: the key keeps its
// lock-delay, a reentrant count does not hold it, and the event is an
// expiry; a plain release of the same lock would have passed the key on.
func TestReleaseLapseKeepsLockDelay(t *testing.T) {
	b := newBench(t)
	s := b.open("a")
	g := b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "k", Lease: time.Minute, Delay: 2 * time.Second}), StatusGranted)
	again := b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "k", Reentrant: true}), StatusGranted)
	if again.Token != g.Token || again.Count != 2 {
		t.Fatalf("reentrant acquire %+v", again)
	}
	other := b.open("b")
	w := b.want(b.apply(Command{Op: OpAcquire, Session: other, Key: "k"}), StatusParked)
	b.events()
	b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: g.Token, Lapse: true}), StatusOK)
	evs := b.events()
	if len(evs) != 1 || evs[0].Kind != EventLost || evs[0].Reason != ReasonLapsed || evs[0].Token != g.Token ||
		evs[0].Action() != "expired" {
		t.Fatalf("a lapse gave %+v, want one expiry of token %d", evs, g.Token)
	}
	b.want(b.apply(Command{Op: OpAcquire, Session: b.open("c"), Key: "k", Try: true}), StatusBusy)
	if g := grantedTickets(b.advance(1999 * time.Millisecond)); len(g) != 0 {
		t.Fatalf("granted during the lock-delay: %v", g)
	}
	if g := grantedTickets(b.advance(time.Millisecond)); !slices.Equal(g, []uint64{w.Ticket}) {
		t.Fatalf("at the delay's end granted %v, want [%d]", g, w.Ticket)
	}
	// The lapsed token is gone: a second lapse, or a release, is stale.
	b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: g.Token, Lapse: true}), StatusStale)
	// A lock without a lock-delay passes on at once, as an expiry would.
	h := b.holderTokens("k")[0]
	b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "k"}), StatusParked)
	b.events()
	b.want(b.apply(Command{Op: OpRelease, Session: other, Key: "k", Token: h, Lapse: true}), StatusOK)
	if g := grantedTickets(b.events()); len(g) != 1 {
		t.Fatalf("a lapse without a delay granted %v", g)
	}
}

func TestLeaseRenewAndWaitDeadline(t *testing.T) {
	b := newBench(t)
	s := b.open("a")
	g := b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "k", Lease: 5 * time.Second}), StatusGranted)
	b.advance(4 * time.Second)
	r := b.want(b.apply(Command{Op: OpRenew, Session: s, Key: "k", Token: g.Token}), StatusOK)
	if r.Left != 5*time.Second {
		t.Fatalf("renew left %v", r.Left)
	}
	if evs := b.advance(4 * time.Second); len(evs) != 0 {
		t.Fatalf("lost before the renewed lease ran out: %+v", evs)
	}
	b.want(b.apply(Command{Op: OpRenew, Session: s, Key: "k", Token: g.Token + 7}), StatusStale)
	other := b.open("b")
	p := b.want(b.apply(Command{Op: OpAcquire, Session: other, Key: "k", Wait: 500 * time.Millisecond}), StatusParked)
	evs := b.advance(500 * time.Millisecond)
	if len(evs) != 1 || evs[0].Kind != EventWithdrawn || evs[0].Reason != ReasonTimeout || evs[0].Ticket != p.Ticket {
		t.Fatalf("at the wait's end %+v", evs)
	}
	evs = b.advance(time.Second)
	if len(evs) != 1 || evs[0].Kind != EventLost || evs[0].Reason != ReasonLeaseExpired {
		t.Fatalf("at the lease's end %+v", evs)
	}
	b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: g.Token}), StatusStale)
}

func TestCancel(t *testing.T) {
	b := newBench(t)
	b.want(b.v1("k", "h"), StatusGranted)
	s := b.open("a")
	b.want(b.apply(Command{Op: OpAcquire, Session: s, Request: 10, Key: "k"}), StatusParked)
	w := b.want(b.v1("k", "w"), StatusParked)
	b.want(b.apply(Command{Op: OpCancel, Session: s, Request: 11, Target: 10}), StatusOK)
	b.want(b.apply(Command{Op: OpCancel, Session: s, Request: 12, Target: 10}), StatusNotParked)
	b.events()
	b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{w.Ticket}) {
		t.Fatalf("after cancel granted %v", g)
	}
	b.want(b.apply(Command{Op: OpCancel, Ticket: 999}), StatusNotParked)
}

// A parked request is found by what its maker was told: a session's by
// the session and its request id, a v1 request by its ticket.
func TestCancelFindsTheRightRequest(t *testing.T) {
	b := newBench(t)
	b.want(b.v1("k", "h"), StatusGranted)
	s1, s2 := b.open("a"), b.open("b")
	p1 := b.want(b.apply(Command{Op: OpAcquire, Session: s1, Request: 10, Key: "k"}), StatusParked)
	b.want(b.apply(Command{Op: OpAcquire, Session: s2, Request: 10, Key: "k"}), StatusParked)
	w := b.want(b.v1("k", "w"), StatusParked)
	b.want(b.apply(Command{Op: OpCancel, Ticket: p1.Ticket}), StatusNotParked) // a session's ticket
	b.want(b.apply(Command{Op: OpCancel, Session: s2, Request: 11, Target: w.Ticket}), StatusNotParked)
	b.events()
	b.want(b.apply(Command{Op: OpCancel, Session: s2, Request: 12, Target: 10}), StatusOK)
	if ev := b.events(); len(ev) != 1 || ev[0].Kind != EventWithdrawn || ev[0].Session != s2 || ev[0].Request != 10 {
		t.Fatalf("cancel of session %d's request 10: events %+v", s2, ev)
	}
	b.want(b.apply(Command{Op: OpCancel, Ticket: w.Ticket}), StatusOK)
	if ev := b.events(); len(ev) != 1 || ev[0].Kind != EventWithdrawn || ev[0].Ticket != w.Ticket {
		t.Fatalf("cancel of ticket %d: events %+v", w.Ticket, ev)
	}
	if st := b.tab.snapshot(b.now); st.Parked != 1 || st.Sessions[0].Parked != 1 {
		t.Fatalf("left parked: %d, session %d: %d, want 1 and 1", st.Parked, s1, st.Sessions[0].Parked)
	}
}

func TestSharedExclusiveFairness(t *testing.T) {
	b := newBench(t)
	r1, r2, w, r3 := b.open("r1"), b.open("r2"), b.open("w"), b.open("r3")
	shared := func(s uint64) Result {
		return b.apply(Command{Op: OpAcquire, Session: s, Key: "k", Mode: Shared, Owner: "o"})
	}
	g1 := b.want(shared(r1), StatusGranted)
	g2 := b.want(shared(r2), StatusGranted)
	if g1.Token == g2.Token {
		t.Fatal("two shared holders share a token")
	}
	pw := b.want(b.apply(Command{Op: OpAcquire, Session: w, Key: "k"}), StatusParked)
	// A reader that comes after a waiting writer does not overtake it.
	p3 := b.want(shared(r3), StatusParked)
	b.events()
	b.want(b.apply(Command{Op: OpRelease, Session: r1, Key: "k", Token: g1.Token}), StatusOK)
	if g := grantedTickets(b.events()); len(g) != 0 {
		t.Fatalf("granted %v with a reader still in", g)
	}
	b.want(b.apply(Command{Op: OpRelease, Session: r2, Key: "k", Token: g2.Token}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{pw.Ticket}) {
		t.Fatalf("granted %v, want the writer", g)
	}
	// Readers waiting together are granted together.
	r4 := b.open("r4")
	p4 := b.want(shared(r4), StatusParked)
	b.events()
	b.want(b.apply(Command{Op: OpRelease, Session: w, Key: "k", Token: b.holderTokens("k")[0]}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{p3.Ticket, p4.Ticket}) {
		t.Fatalf("granted %v, want both readers", g)
	}
	// An upgrade by a shared holder is refused.
	b.want(b.apply(Command{Op: OpAcquire, Session: r3, Key: "k", Owner: "o"}), StatusUpgrade)
}

func TestSemaphoreAndLimitMismatch(t *testing.T) {
	b := newBench(t)
	var ss []uint64
	for i := range 6 {
		ss = append(ss, b.open(fmt.Sprint("s", i)))
	}
	acq := func(s uint64, limit uint32) Result {
		return b.apply(Command{Op: OpAcquire, Session: s, Key: "sem", Limit: limit})
	}
	var toks []uint64
	for _, s := range ss[:4] {
		toks = append(toks, b.want(acq(s, 4), StatusGranted).Token)
	}
	p := b.want(acq(ss[4], 4), StatusParked)
	if r := b.want(acq(ss[5], 3), StatusLimitMismatch); r.Limit != 4 {
		t.Fatalf("mismatch names limit %d", r.Limit)
	}
	b.want(b.v1("sem", "v1"), StatusLimitMismatch)
	b.events()
	b.want(b.apply(Command{Op: OpRelease, Session: ss[1], Key: "sem", Token: toks[1]}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{p.Ticket}) {
		t.Fatalf("granted %v", g)
	}
	if n := len(b.holders("sem")); n != 4 {
		t.Fatalf("%d holders", n)
	}
}

func TestReentrancy(t *testing.T) {
	b := newBench(t)
	s := b.open("a")
	acq := func(owner string) Result {
		return b.apply(Command{Op: OpAcquire, Session: s, Key: "k", Reentrant: true, Owner: owner})
	}
	g := b.want(acq("job"), StatusGranted)
	g2 := b.want(acq("job"), StatusGranted)
	if g2.Token != g.Token || g2.Count != 2 {
		t.Fatalf("reentrant acquire %+v after %+v", g2, g)
	}
	// Another owner in the same session queues.
	b.want(acq("other"), StatusParked)
	r := b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: g.Token}), StatusOK)
	if r.Count != 1 || len(b.holders("k")) != 1 {
		t.Fatalf("first release %+v", r)
	}
	b.events()
	b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: g.Token}), StatusOK)
	if g := grantedTickets(b.events()); len(g) != 1 {
		t.Fatal("the key did not pass on at count zero")
	}
}

func TestPriorityAndAging(t *testing.T) {
	b := newBench(t)
	b.want(b.v1("k", "h"), StatusGranted)
	s := b.open("a")
	acq := func(p int32) Result {
		return b.apply(Command{Op: OpAcquire, Session: s, Key: "k", Priority: p, Owner: fmt.Sprint(p, b.now)})
	}
	low := b.want(acq(1), StatusParked)
	b.now = b.now.Add(time.Millisecond)
	high := b.want(acq(10), StatusParked)
	b.now = b.now.Add(time.Millisecond)
	mid := b.want(acq(5), StatusParked)
	b.events()
	b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{high.Ticket}) {
		t.Fatalf("granted %v, want the highest priority", g)
	}
	// After waiting 5 aging steps more than mid has... low (1) has waited
	// as long as mid: at 5 s low is worth 6, mid 10: mid still first.
	b.now = b.now.Add(5 * AgingStep)
	b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: b.holderTokens("k")[0]}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{mid.Ticket}) {
		t.Fatalf("granted %v, want mid", g)
	}
	// A low-priority waiter overtakes a fresh high-priority one once it
	// has aged past it.
	late := b.want(acq(8), StatusParked)
	_ = late
	b.now = b.now.Add(2 * AgingStep) // low: 1+7+ = 8+; late: 8+2 = 10 → late first
	b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: b.holderTokens("k")[0]}), StatusOK)
	got := grantedTickets(b.events())
	if !slices.Equal(got, []uint64{late.Ticket}) {
		t.Fatalf("granted %v, want the later high one before low has aged enough", got)
	}
	b.now = b.now.Add(0)
	b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: b.holderTokens("k")[0]}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{low.Ticket}) {
		t.Fatalf("granted %v, want low", g)
	}
}

func TestAgingBoundsStarvation(t *testing.T) {
	// A priority 0 waiter behind a stream of priority 10 requests, one new
	// every release, is served within 10 aging steps (plus one turn).
	b := newBench(t)
	b.want(b.v1("k", "h"), StatusGranted)
	s := b.open("a")
	owner := 0
	acq := func(p int32) Result {
		owner++
		return b.apply(Command{Op: OpAcquire, Session: s, Key: "k", Priority: p, Owner: fmt.Sprint(owner)})
	}
	low := b.want(acq(0), StatusParked)
	start := b.now
	b.want(acq(10), StatusParked)
	b.events()
	b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusOK)
	for i := 0; ; i++ {
		if i > 100 {
			t.Fatal("low-priority waiter starved")
		}
		b.now = b.now.Add(AgingStep / 2)
		b.want(acq(10), StatusParked)
		b.events()
		b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: b.holderTokens("k")[0]}), StatusOK)
		if g := grantedTickets(b.events()); slices.Contains(g, low.Ticket) {
			if waited := b.now.Sub(start); waited > 11*AgingStep {
				t.Fatalf("served after %v", waited)
			}
			return
		}
	}
}

func TestDeadlockDetection(t *testing.T) {
	b := newBench(t)
	a, bb, c := b.open("a"), b.open("b"), b.open("c")
	acq := func(s uint64, key string) Result {
		return b.apply(Command{Op: OpAcquire, Session: s, Key: key})
	}
	b.want(acq(a, "x"), StatusGranted)
	b.want(acq(bb, "y"), StatusGranted)
	b.want(acq(c, "z"), StatusGranted)
	b.want(acq(a, "y"), StatusParked)
	b.want(acq(bb, "z"), StatusParked)
	b.want(acq(c, "x"), StatusDeadlock) // c → a → b → c
	if n := b.tab.Counters().Deadlocks; n != 1 {
		t.Fatalf("%d deadlocks counted", n)
	}
	// A self-cycle: a session asking again for what it holds.
	b.want(acq(a, "x"), StatusDeadlock)
	// No false deadlock once a waiter has left: b's wait for z ends.
	b.want(b.apply(Command{Op: OpCancel, Session: bb, Target: b.req[bb]}), StatusOK) // b's acquire of z
	b.want(acq(c, "x"), StatusParked)
	// Nor after an expiry.
	d := b.open("d")
	b.want(acq(d, "w"), StatusGranted)
	b.want(acq(d, "x"), StatusParked) // d waits for a
	b.want(b.apply(Command{Op: OpExpireSession, Session: d}), StatusOK)
	b.want(acq(a, "w"), StatusGranted)
	// Two shared requests of one session behind a writer do not deadlock.
	r, w := b.open("r"), b.open("w")
	b.want(b.apply(Command{Op: OpAcquire, Session: r, Key: "s", Mode: Shared, Owner: "1"}), StatusGranted)
	b.want(b.apply(Command{Op: OpAcquire, Session: w, Key: "s"}), StatusParked)
	b.want(b.apply(Command{Op: OpAcquire, Session: r, Key: "t"}), StatusGranted)
	b.want(b.apply(Command{Op: OpAcquire, Session: r, Key: "s", Mode: Shared, Owner: "2"}), StatusParked)
	b.want(b.apply(Command{Op: OpAcquire, Session: r, Key: "s", Mode: Shared, Owner: "2"}), StatusParked)
}

// A node is waited for by the queue of a key it holds and by a request
// queued behind one it has parked; a cycle through either is refused,
// however little else the node holds, and a node that nobody waits for
// parks.
func TestDeadlockThroughEveryKindOfWait(t *testing.T) {
	b := newBench(t)
	h, p, q := b.open("h"), b.open("p"), b.open("q")
	acq := func(s uint64, key, owner string) Result {
		return b.apply(Command{Op: OpAcquire, Session: s, Key: key, Owner: owner})
	}
	b.want(acq(h, "k", ""), StatusGranted)
	b.want(acq(q, "m", ""), StatusGranted)
	// p holds nothing; its request on k has q's behind it: q waits for p.
	b.want(acq(p, "k", ""), StatusParked)
	b.want(acq(q, "k", ""), StatusParked)
	b.want(acq(p, "m", ""), StatusDeadlock) // p → q (holds m) → p (ahead of q on k)
	// Another owner of p holds nothing and waits for nothing: it parks.
	b.want(acq(p, "m", "other"), StatusParked)
	// h holds k, which p and q wait for; h's wait for m (q's) closes a cycle.
	b.want(acq(h, "m", ""), StatusDeadlock) // h → q (holds m) → h (holds k, which q waits for)
	// A node whose key nobody waits for makes no cycle.
	z := b.open("z")
	b.want(acq(z, "n", ""), StatusGranted)
	b.want(acq(z, "m", ""), StatusParked)
}

func TestRestartRaisesTokensAndWithdrawsConnectionBound(t *testing.T) {
	b := newBench(t)
	b.want(b.v1("k", "h"), StatusGranted)
	w := b.want(b.v1("k", "gone"), StatusParked)
	s := b.open("a")
	ps := b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "k"}), StatusParked)
	b.events()
	b.want(b.apply(Command{Op: OpRestart, Floor: uint64(b.now.UnixNano())}), StatusOK)
	evs := b.events()
	if len(evs) != 1 || evs[0].Ticket != w.Ticket || evs[0].Reason != ReasonRestart {
		t.Fatalf("restart events %+v", evs)
	}
	if b.tab.LastToken() < uint64(b.now.UnixNano()) {
		t.Fatalf("token %d below the clock %d", b.tab.LastToken(), b.now.UnixNano())
	}
	b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusOK)
	if g := grantedTickets(b.events()); !slices.Equal(g, []uint64{ps.Ticket}) {
		t.Fatalf("granted %v, want the session's request", g)
	}
}

// exportOf returns the records of t's state.
func exportOf(t *Table) []Record {
	var out []Record
	t.Export(func(r *Record) { out = append(out, *r) })
	return out
}

func TestExportImportRoundTrip(t *testing.T) {
	b := newBench(t)
	s := b.open("a")
	s2 := b.open("b")
	b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "lease", Lease: time.Minute, Delay: time.Second}), StatusGranted)
	b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "sh", Mode: Shared, Owner: "x", Reentrant: true}), StatusGranted)
	b.want(b.apply(Command{Op: OpAcquire, Session: s2, Key: "sh", Mode: Shared}), StatusGranted)
	b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "sh", Mode: Shared, Owner: "x", Reentrant: true}), StatusGranted)
	b.want(b.apply(Command{Op: OpAcquire, Session: s2, Key: "lease", Wait: time.Hour, Priority: 3}), StatusParked)
	b.want(b.v1("v1", "src"), StatusGranted)
	b.want(b.v1("v1", "src2"), StatusParked)
	b.want(b.apply(Command{Op: OpAcquire, Session: s2, Key: "sem", Limit: 3}), StatusGranted)
	lost := b.open("lost")
	b.want(b.apply(Command{Op: OpAcquire, Session: lost, Key: "delayed", Delay: 10 * time.Second}), StatusGranted)
	b.want(b.apply(Command{Op: OpExpireSession, Session: lost}), StatusOK)
	b.events()

	recs := exportOf(b.tab)
	copyT := NewTable()
	for i := range recs {
		if !copyT.Import(&recs[i]) {
			t.Fatalf("import refused %+v", recs[i])
		}
	}
	copyT.FinishImport()
	if got := exportOf(copyT); !slices.Equal(got, recs) {
		t.Fatalf("export of the import differs:\n%+v\n%+v", got, recs)
	}
	// Both go on the same way.
	twin := &bench{t: t, tab: copyT, now: b.now, req: map[uint64]uint64{}}
	for k, v := range b.req {
		twin.req[k] = v
	}
	steps := []func(x *bench) Result{
		func(x *bench) Result { return x.apply(Command{Op: OpCloseSession, Session: s}) },
		func(x *bench) Result { x.advance(11 * time.Second); return Result{} },
		func(x *bench) Result { return x.apply(Command{Op: OpRelease, Key: "v1"}) },
		func(x *bench) Result { return x.apply(Command{Op: OpAcquire, Session: s2, Key: "delayed"}) },
	}
	for i, step := range steps {
		r1, r2 := step(b), step(twin)
		if r1 != r2 {
			t.Fatalf("step %d: %+v and %+v", i, r1, r2)
		}
		if e1, e2 := b.events(), twin.events(); !slices.Equal(e1, e2) {
			t.Fatalf("step %d events:\n%+v\n%+v", i, e1, e2)
		}
	}
	if !slices.Equal(exportOf(b.tab), exportOf(twin.tab)) {
		t.Fatal("states differ after the same steps")
	}
}

// A v1 holder restored from a log of the format before fencing tokens is
// charged to no account: the table exports it, copies it and releases it.
func TestRestoreV1Exports(t *testing.T) {
	b := newBench(t)
	b.tab.RestoreV1("old", "src", "10.0.0.1:1", b.now)
	recs := exportOf(b.tab.Clone())
	if len(recs) != 2 || recs[1].Kind != RecordHolder || recs[1].Key != "old" || recs[1].Account != "" {
		t.Fatalf("export %+v, want the state and the holder of \"old\", of no account", recs)
	}
	b.want(b.apply(Command{Op: OpRelease, Key: "old"}), StatusOK)
	if n := b.tab.Len(); n != 0 {
		t.Fatalf("%d keys after the release", n)
	}
}

// The priority example of docs/protocol.md, step by step.
func TestPriorityDocExample(t *testing.T) {
	b := newBench(t)
	s := b.open("s")
	owner := 0
	acq := func(p int32) uint64 {
		owner++
		return b.want(b.apply(Command{Op: OpAcquire, Session: s, Key: "k", Priority: p, Owner: fmt.Sprint(owner)}), StatusParked).Ticket
	}
	release := func() []uint64 {
		b.events()
		if h := b.holders("k")[0]; h.Session == 0 {
			b.want(b.apply(Command{Op: OpRelease, Key: "k"}), StatusOK)
		} else {
			b.want(b.apply(Command{Op: OpRelease, Session: s, Key: "k", Token: h.Token}), StatusOK)
		}
		return grantedTickets(b.events())
	}
	b.want(b.v1("k", "H"), StatusGranted)
	a := acq(1)
	next := acq(5)
	for _, at := range []time.Duration{time.Second, 2 * time.Second, 2 * time.Second} {
		b.now = b.now.Add(at)
		if got := release(); !slices.Equal(got, []uint64{next}) {
			t.Fatalf("granted %v, want the priority-5 request %d", got, next)
		}
		next = acq(5)
	}
	b.now = b.now.Add(2 * time.Second)
	if got := release(); !slices.Equal(got, []uint64{a}) {
		t.Fatalf("at 7 s granted %v, want A %d", got, a)
	}
}

// TestHolderNote: a session's acquire keeps its note with the lock, at
// once or after a wait, through an export and import; a reentrant count-up
// keeps the first note; v1 and an over-long note are refused.
func TestHolderNote(t *testing.T) {
	b := newBench(t)
	s1, s2 := b.open("a"), b.open("b")
	b.want(b.apply(Command{Op: OpAcquire, Session: s1, Key: "k", Note: "job 7 on host-3", Reentrant: true}), StatusGranted)
	b.want(b.apply(Command{Op: OpAcquire, Session: s1, Key: "k", Note: "other", Reentrant: true}), StatusGranted)
	b.want(b.apply(Command{Op: OpAcquire, Session: s2, Key: "k", Note: "waiting\x00\xff"}), StatusParked)
	if hs := b.holders("k"); len(hs) != 1 || hs[0].Note != "job 7 on host-3" || hs[0].Count != 2 {
		t.Fatalf("holders %+v", hs)
	}
	evs := b.events()
	if len(evs) != 1 || evs[0].Kind != EventGranted || evs[0].Note != "job 7 on host-3" {
		t.Fatalf("events %+v", evs)
	}

	// The waiter's note survives a snapshot.
	copied := NewTable()
	b.tab.Export(func(r *Record) {
		if !copied.Import(r) {
			t.Fatalf("import %+v", r)
		}
	})
	copied.FinishImport()
	b.tab = copied
	for range 2 {
		b.want(b.apply(Command{Op: OpRelease, Session: s1, Key: "k", Token: 1}), StatusOK)
	}
	evs = b.events()
	var granted *Event
	for i := range evs {
		if evs[i].Kind == EventGranted {
			granted = &evs[i]
		}
	}
	if granted == nil || granted.Note != "waiting\x00\xff" || granted.Session != s2 {
		t.Fatalf("events after the release %+v", evs)
	}
	if hs := b.holders("k"); len(hs) != 1 || hs[0].Note != "waiting\x00\xff" {
		t.Fatalf("holders %+v", hs)
	}
	if snap := b.tab.snapshot(b.now); len(snap.Holders) != 1 || snap.Holders[0].Note != "waiting\x00\xff" {
		t.Fatalf("snapshot holders %+v", snap.Holders)
	}

	long := string(make([]byte, MaxNoteLen+1))
	b.want(b.apply(Command{Op: OpAcquire, Session: s1, Key: "x", Note: long}), StatusInvalid)
	b.want(b.apply(Command{Op: OpAcquire, Session: s1, Key: "x", Note: long[1:]}), StatusGranted)
	b.want(b.apply(Command{Op: OpAcquire, Key: "y", Source: "v1", Note: "n", ConnBound: true}), StatusInvalid)
}
