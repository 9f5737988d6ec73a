package mutex

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeClock is a node clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// route records what a session is delivered.
type route struct {
	mu  sync.Mutex
	out []Output
}

func (r *route) Deliver(o Output) {
	r.mu.Lock()
	r.out = append(r.out, o)
	r.mu.Unlock()
}

func (r *route) Flush() {}

func (r *route) events() []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []EventKind
	for _, o := range r.out {
		if o.IsEvent {
			out = append(out, o.Event.Kind)
		}
	}
	return out
}

// The node expires a session that has not been touched for its TTL before
// it applies anything else, so a release never passes a key to a dead
// session; a session that is touched lives on.
func TestNodeExpiresBeforeGranting(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	j := NewMemoryJournal()
	n := NewNode(NodeConfig{Clock: clk.Now, Journal: j})
	defer n.Close()
	if _, _, err := n.TryLock(Claim{Key: "k", Source: "v1"}); err != nil {
		t.Fatal(err)
	}
	dead, _, _ := n.OpenSession("dead", 10*time.Second, [SecretHashLen]byte{}, "", &route{})
	alive, _, _ := n.OpenSession("alive", 10*time.Second, [SecretHashLen]byte{}, "", &route{})
	for i, l := range []*Live{dead, alive} {
		res, _, _ := n.ApplySession(Command{Op: OpAcquire, Session: l.ID(), Request: 1, Key: "k"})
		if res.Status != StatusParked {
			t.Fatalf("session %d: %v", i, res.Status)
		}
	}
	clk.add(9 * time.Second)
	alive.Touch()
	clk.add(2 * time.Second) // dead's TTL has passed; alive's has not
	// No timer has fired yet: the release itself must expire dead first.
	if _, err := n.Release("k"); err != nil {
		t.Fatal(err)
	}
	h, ok := n.Holder("k")
	if !ok || h.Session != alive.ID() {
		t.Fatalf("k held by %+v, want the live session %d", h, alive.ID())
	}
	if s := n.Snapshot(); len(s.Sessions) != 1 || s.Counters.SessionExpiries != 1 {
		t.Fatalf("sessions %+v, expiries %d", s.Sessions, s.Counters.SessionExpiries)
	}
	// The journal's replica saw the same commands, the expiry included.
	var got, want []Record
	j.Export(func(r *Record) { got = append(got, *r) })
	n.Export(func(r *Record) { want = append(want, *r) })
	if !slices.Equal(got, want) {
		t.Fatalf("replica differs:\n%+v\n%+v", got, want)
	}
}

// Observe sees every event, in order; stop ends the calls.
func TestNodeObserve(t *testing.T) {
	n := NewNode(NodeConfig{})
	defer n.Close()
	var mu sync.Mutex
	var kinds []EventKind
	stop := n.Observe(func(ev Event) {
		mu.Lock()
		kinds = append(kinds, ev.Kind)
		mu.Unlock()
	})
	n.TryLock(Claim{Key: "k", Source: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	done := lockParked(ctx, n, Claim{Key: "k", Source: "b"})
	n.Release("k")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cancel()
	n.ResetKey("k")
	stop()
	stop()
	n.TryLock(Claim{Key: "after", Source: "a"})
	mu.Lock()
	defer mu.Unlock()
	want := []EventKind{EventGranted, EventReleased, EventGranted, EventLost}
	if !slices.Equal(kinds, want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
}

// lockParked calls n.Lock(ctx, c) in a goroutine and returns, once the
// lock has parked, the channel of its error.
func lockParked(ctx context.Context, n *Node, c Claim) <-chan error {
	queued := n.Describe(c.Key).Queue
	done := make(chan error, 1)
	go func() {
		_, err := n.Lock(ctx, c)
		done <- err
	}()
	for n.Describe(c.Key).Queue != queued+1 {
		time.Sleep(time.Millisecond)
	}
	return done
}

// Locked runs under the lock observers are called with: what an observer
// keeps without a lock of its own is Locked's to read (the race detector
// checks it, with locks and releases going on meanwhile).
func TestNodeLocked(t *testing.T) {
	n := NewNode(NodeConfig{})
	defer n.Close()
	seen := 0 // the observer's, under the node's lock only
	n.Observe(func(Event) { seen++ })
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "k" + strconv.Itoa(i)
			for range 50 {
				n.TryLock(Claim{Key: key, Source: "a"})
				n.Release(key)
			}
		}()
	}
	for read := 0; read < 400; {
		n.Locked(func() { read = seen })
	}
	wg.Wait()
}

// A Lock whose context ends while it waits is withdrawn: the next waiter
// gets the key.
func TestNodeLockCancelled(t *testing.T) {
	n := NewNode(NodeConfig{})
	defer n.Close()
	n.TryLock(Claim{Key: "k", Source: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	done := lockParked(ctx, n, Claim{Key: "k", Source: "gives-up"})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled lock: %v", err)
	}
	if q := n.Describe("k").Queue; q != 0 {
		t.Fatalf("%d waiters after the cancel", q)
	}
}

// A session's outputs reach its route in the order they happened: the
// events of a close before the close's own result.
func TestNodeRouteOrder(t *testing.T) {
	n := NewNode(NodeConfig{})
	defer n.Close()
	r := &route{}
	l, _, _ := n.OpenSession("s", time.Minute, [SecretHashLen]byte{}, "", r)
	n.TryLock(Claim{Key: "held", Source: "v1"})
	n.ApplySession(Command{Op: OpAcquire, Session: l.ID(), Request: 1, Key: "held"})
	n.ApplySession(Command{Op: OpCloseSession, Session: l.ID(), Request: 2})
	if got := r.events(); !slices.Equal(got, []EventKind{EventWithdrawn, EventSessionEnded}) {
		t.Fatalf("events %v", got)
	}
	r.mu.Lock()
	last := r.out[len(r.out)-1]
	r.mu.Unlock()
	if last.IsEvent || last.Command.Op != OpCloseSession {
		t.Fatalf("last output %+v, want the close's result", last)
	}
}

// Every key released: the table is empty, whatever came before.
func TestMillionKeysLeaveEmptyTable(t *testing.T) {
	keys := 1_000_000
	if testing.Short() {
		keys = 10_000
	}
	n := NewNode(NodeConfig{})
	defer n.Close()
	for i := range keys {
		key := string(rune('a'+i%26)) + string(rune(i))
		if _, _, err := n.TryLock(Claim{Key: key, Source: "s"}); err != nil {
			t.Fatal(err)
		}
		n.Release(key)
	}
	if got := n.Len(); got != 0 {
		t.Fatalf("%d keys left", got)
	}
}

// A session is charged to the account it was opened with (its locks are
// the session's), and a resume that names an account must name that one.
func TestNodeSessionAccount(t *testing.T) {
	n := NewNode(NodeConfig{})
	defer n.Close()
	secret := [SecretHashLen]byte{7}
	l, _, _ := n.OpenSessionAs("svc-account", "svc", time.Minute, secret, "", &route{})
	var charged []string
	n.Export(func(r *Record) {
		if r.Kind == RecordSession {
			charged = append(charged, r.Account)
		}
	})
	if !slices.Equal(charged, []string{"svc-account"}) {
		t.Fatalf("accounts of the sessions: %q", charged)
	}
	if name, ok := n.SessionName(l.ID()); !ok || name != "svc" {
		t.Fatalf("SessionName = %q, %v", name, ok)
	}
	if _, ok := n.SessionName(l.ID() + 1); ok {
		t.Fatal("SessionName of no session found one")
	}
	attach := func(SessionState, Route, []Output) Route { return &route{} }
	if n.Resume(l.ID(), secret, "intruder", "", attach) != nil {
		t.Fatal("resumed with another account")
	}
	for _, account := range []string{"svc-account", ""} {
		if n.Resume(l.ID(), secret, account, "", attach) == nil {
			t.Fatalf("resume with account %q refused", account)
		}
	}
}

// The node stamps its limits on every acquire: an account's lock over its
// cap is refused and counted, whatever front end asked, and a session is
// charged to the account it was opened with.
func TestNodeLimitsAndRefusals(t *testing.T) {
	n := NewNode(NodeConfig{Limits: Limits{MaxHeld: 3, MaxParked: 1}})
	defer n.Close()
	v1 := func(key, account string) Status {
		res, _ := n.Apply(Command{Op: OpAcquire, Key: key, Source: "s", Account: account, Try: true, ConnBound: true})
		return res.Status
	}
	for _, k := range []string{"a", "b", "x"} {
		if st := v1(k, "10.0.0.1"); st != StatusGranted {
			t.Fatalf("lock %q of an account capped at three: %v", k, st)
		}
	}
	if st := v1("y", "10.0.0.1"); st != StatusOverLimit {
		t.Fatalf("a fourth lock of an account capped at three: %v", st)
	}
	if st := v1("c", "10.0.0.2"); st != StatusGranted {
		t.Fatalf("another account's lock: %v", st)
	}
	l, res, _ := n.OpenSessionAs("10.0.0.2", "worker", time.Minute, [SecretHashLen]byte{}, "", &route{})
	if l == nil {
		t.Fatalf("open session: %v", res.Status)
	}
	acquire := func(key string, req uint64) Status {
		res, _, _ := n.ApplySession(Command{Op: OpAcquire, Session: l.ID(), Request: req, Key: key})
		return res.Status
	}
	if st := acquire("a", 1); st != StatusParked {
		t.Fatalf("the session's first acquire of a held key: %v", st)
	}
	if st := acquire("b", 2); st != StatusOverLimit {
		t.Fatalf("a second parked request of an account capped at one: %v", st)
	}
	n.Refused(RefusedRate)
	got := n.Snapshot().Counters.Refusals
	if got[RefusedHeld] != 1 || got[RefusedParked] != 1 || got[RefusedRate] != 1 {
		t.Errorf("refusals %v, want one held, one parked, one rate", got)
	}
	if u := n.t.Usage("10.0.0.2"); u.Held != 1 || u.Parked != 1 {
		t.Errorf("usage of 10.0.0.2: %+v", u)
	}
}

// ApplySessionKey keeps no byte of the key it is given: the caller's
// buffer may be overwritten at once, for a key new to the table and for
// one in use, and what the journal and the session were given stays.
func TestApplySessionKeyKeepsNoBytes(t *testing.T) {
	j := &keyJournal{}
	n := NewNode(NodeConfig{Journal: j})
	defer n.Close()
	rt := &route{}
	l, _, _ := n.OpenSession("a", 10*time.Second, [SecretHashLen]byte{}, "", rt)
	buf := []byte("jobs/nightly")
	res, _, _ := n.ApplySessionKey(Command{Op: OpAcquire, Session: l.ID(), Request: 1}, buf)
	if res.Status != StatusGranted {
		t.Fatalf("acquire: %v", res.Status)
	}
	copy(buf, "XXXXXXXXXXXX")
	if h, ok := n.Holder("jobs/nightly"); !ok || h.Token != res.Token {
		t.Fatalf("holder of jobs/nightly after the buffer changed: %+v, %v", h, ok)
	}
	buf = []byte("jobs/nightly")
	rel, _, _ := n.ApplySessionKey(Command{Op: OpRelease, Session: l.ID(), Request: 2, Token: res.Token}, buf)
	if rel.Status != StatusOK {
		t.Fatalf("release: %v", rel.Status)
	}
	copy(buf, "YYYYYYYYYYYY")
	if got, want := j.keys[max(len(j.keys)-2, 0):], []string{"jobs/nightly", "jobs/nightly"}; !slices.Equal(got, want) {
		t.Fatalf("journaled keys of the acquire and the release %q, want %q", got, want)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, o := range rt.out {
		if !o.IsEvent && o.Command.Key != "jobs/nightly" {
			t.Fatalf("delivered %v of key %q", o.Command.Op, o.Command.Key)
		}
	}
}

// keyJournal keeps the key of each command it is given (all of the tests'
// commands are applied from one goroutine).
type keyJournal struct{ keys []string }

func (j *keyJournal) Append(c *Command) Pending {
	j.keys = append(j.keys, c.Key)
	return nil
}
