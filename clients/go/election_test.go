package lockingcenter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/session"
)

// leaderOf is who a session leads as.
func leaderOf(s *lockingcenter.Session, name string, l *lockingcenter.Lock) lockingcenter.Leader {
	return lockingcenter.Leader{Name: name, Session: s.ID(), Token: l.Token()}
}

// expectLeader checks the next value Observe delivers.
func expectLeader(t *testing.T, ch <-chan lockingcenter.Leader, want lockingcenter.Leader) {
	t.Helper()
	got, ok := receiveOK(t, "a leader", ch)
	if !ok {
		t.Fatalf("Observe ended, want %+v", want)
	}
	if got != want {
		t.Fatalf("Observe: %+v, want %+v", got, want)
	}
}

// Three candidates lead in the order they campaigned, each as soon as the
// one before resigns; Observe reports each leader once, and nobody after
// the last resigns, as Leader does.
func TestElectionOrder(t *testing.T) {
	srv := startServer(t, serverOptions{})
	ctx := context.Background()
	names := []string{"a", "b", "c"}
	var sessions []*lockingcenter.Session
	var elections []*lockingcenter.Election
	for _, n := range names {
		s := srv.open(lockingcenter.WithSource(n))
		sessions = append(sessions, s)
		elections = append(elections, lockingcenter.NewElection(s, "leader/job"))
	}
	watcher := lockingcenter.NewElection(srv.open(), "leader/job")
	octx, stop := context.WithCancel(ctx)
	defer stop()
	observed := watcher.Observe(octx)
	expectLeader(t, observed, lockingcenter.Leader{})
	if _, err := watcher.Leader(ctx); !errors.Is(err, lockingcenter.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v", err)
	}

	leadA, err := elections[0].Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expectLeader(t, observed, leaderOf(sessions[0], "a", leadA))
	if again, err := elections[0].Campaign(ctx); err != nil || again != leadA {
		t.Fatalf("a second Campaign of the leader: %v, %v", again, err)
	}
	b := make(chan acquired, 1)
	go func() { l, err := elections[1].Campaign(ctx); b <- acquired{l, err} }()
	srv.waitQueue("leader/job", 1)
	c := make(chan acquired, 1)
	go func() { l, err := elections[2].Campaign(ctx); c <- acquired{l, err} }()
	srv.waitQueue("leader/job", 2)
	if err := elections[1].Resign(); err != nil { // not leading: nothing to do
		t.Fatal(err)
	}

	if err := elections[0].Resign(); err != nil {
		t.Fatal(err)
	}
	if !ended(leadA.Done()) || !errors.Is(leadA.Cause(), lockingcenter.ErrLockReleased) {
		t.Fatalf("after Resign: %v", leadA.Cause())
	}
	leadB := receive(t, "b's leadership", b)
	if leadB.err != nil {
		t.Fatal(leadB.err)
	}
	expectLeader(t, observed, leaderOf(sessions[1], "b", leadB.lock))
	if l, err := watcher.Leader(ctx); err != nil || l != leaderOf(sessions[1], "b", leadB.lock) {
		t.Fatalf("Leader: %+v, %v", l, err)
	}

	if err := elections[1].Resign(); err != nil {
		t.Fatal(err)
	}
	leadC := receive(t, "c's leadership", c)
	if leadC.err != nil {
		t.Fatal(leadC.err)
	}
	expectLeader(t, observed, leaderOf(sessions[2], "c", leadC.lock))
	if err := elections[2].Resign(); err != nil {
		t.Fatal(err)
	}
	expectLeader(t, observed, lockingcenter.Leader{})
	if l, err := watcher.Leader(ctx); !errors.Is(err, lockingcenter.ErrNoLeader) {
		t.Fatalf("Leader after the last resign: %+v, %v", l, err)
	}
	if leadB.lock.Token() <= leadA.Token() || leadC.lock.Token() <= leadB.lock.Token() {
		t.Fatal("leadership tokens do not increase")
	}

	stop()
	if l, ok := receiveOK(t, "the end of Observe", observed); ok {
		t.Fatalf("Observe after its context ended: %+v", l)
	}
	if _, err := elections[0].Campaign(ctx, lockingcenter.Shared()); !errors.Is(err, lockingcenter.ErrInvalidOption) {
		t.Fatalf("a shared campaign: %v", err)
	}
}

// Two Elections of one session on one key are two candidates.
func TestElectionTwoCandidatesOfOneSession(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s := srv.open()
	first, second := lockingcenter.NewElection(s, "leader/one"), lockingcenter.NewElection(s, "leader/one")
	lead, err := first.Campaign(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Campaign(context.Background(), lockingcenter.TryOnce()); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("the other candidate: %v, want ErrBusy", err)
	}
	waits := make(chan acquired, 1)
	go func() { l, err := second.Campaign(context.Background()); waits <- acquired{l, err} }()
	srv.waitQueue("leader/one", 1)
	first.Resign()
	got := receive(t, "the second candidate", waits)
	if got.err != nil || got.lock.Token() <= lead.Token() {
		t.Fatalf("second candidate: %v", got.err)
	}
	// A leadership lost (here to a reset) is over: Campaign asks anew.
	srv.node.ResetKey("leader/one")
	receive(t, "the end of the leadership", got.lock.Done())
	again, err := second.Campaign(context.Background())
	if err != nil || again == got.lock || again.Token() <= got.lock.Token() {
		t.Fatalf("Campaign after a lost leadership: %v", err)
	}
}

// A leader whose session expires on the server loses its leadership
// (Lock.Done); after the lock-delay the next candidate leads; Observe
// reports the vacancy and the new leader.
func TestElectionLeaderExpires(t *testing.T) {
	clk := newFakeClock()
	srv := startServer(t, serverOptions{clock: clk, cfg: session.Config{MinTTL: time.Second}})
	ctx := context.Background()
	// The client's own clocks never move: the server decides.
	a := srv.open(lockingcenter.WithSource("a"), lockingcenter.WithTTL(time.Second), lockingcenter.WithClock(newFakeClock()))
	b := srv.open(lockingcenter.WithSource("b"), lockingcenter.WithClock(newFakeClock()))
	o := srv.open(lockingcenter.WithClock(newFakeClock()))
	leadA, err := lockingcenter.NewElection(a, "leader/x").Campaign(ctx, lockingcenter.WithLockDelay(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	observed := lockingcenter.NewElection(o, "leader/x").Observe(ctx)
	expectLeader(t, observed, leaderOf(a, "a", leadA))
	next := make(chan acquired, 1)
	go func() { l, err := lockingcenter.NewElection(b, "leader/x").Campaign(ctx); next <- acquired{l, err} }()
	srv.waitQueue("leader/x", 1)

	srv.advance(time.Second) // a's TTL: b's and o's sessions renew as they talk
	receive(t, "the end of a's leadership", leadA.Done())
	if !errors.Is(leadA.Cause(), lockingcenter.ErrSessionExpired) {
		t.Fatalf("a's leadership ended with %v", leadA.Cause())
	}
	expectLeader(t, observed, lockingcenter.Leader{}) // the lock-delay
	srv.advance(500 * time.Millisecond)
	leadB := receive(t, "b's leadership", next)
	if leadB.err != nil {
		t.Fatal(leadB.err)
	}
	expectLeader(t, observed, leaderOf(b, "b", leadB.lock))
}

// Observe goes on across a dropped connection: a change of leader while
// the observer was away is reported once it is back.
func TestElectionObserveResumes(t *testing.T) {
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	o := srv.open(lockingcenter.WithDialer(tn.dial), lockingcenter.WithConnectTimeout(time.Second))
	a := srv.open(lockingcenter.WithSource("a"))
	b := srv.open(lockingcenter.WithSource("b"), lockingcenter.WithConnectTimeout(time.Second))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ea, eb := lockingcenter.NewElection(a, "leader/r"), lockingcenter.NewElection(b, "leader/r")
	leadA, err := ea.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	observed := lockingcenter.NewElection(o, "leader/r").Observe(ctx)
	expectLeader(t, observed, leaderOf(a, "a", leadA))

	tn.block()
	tn.cut()
	srv.waitDetached(o.ID())
	ea.Resign()
	leadB, err := eb.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tn.unblock()
	expectLeader(t, observed, leaderOf(b, "b", leadB))

	// A restarted server forgets the watch: what changed meanwhile is
	// found by asking.
	c := srv.open(lockingcenter.WithSource("c"), lockingcenter.WithConnectTimeout(time.Second))
	cLeads := make(chan acquired, 1)
	go func() { l, err := lockingcenter.NewElection(c, "leader/r").Campaign(ctx); cLeads <- acquired{l, err} }()
	srv.waitQueue("leader/r", 1)
	srv.stop()
	srv.node.ResetKey("leader/r") // b loses the key, c gets it
	srv.serve(srv.addr)
	leadC := receive(t, "c's leadership", cLeads)
	if leadC.err != nil {
		t.Fatal(leadC.err)
	}
	expectLeader(t, observed, leaderOf(c, "c", leadC.lock))
}

// A semaphore of 4 shared by 16 sessions never has more than 4 holders,
// each with a token of its own.
func TestSemaphoreLimit(t *testing.T) {
	srv := startServer(t, serverOptions{})
	ctx := context.Background()
	sems := make([]*lockingcenter.Semaphore, 16)
	for i := range sems {
		sems[i] = lockingcenter.NewSemaphore(srv.open(), "pool", 4)
	}
	var first []*lockingcenter.Lock
	for _, m := range sems[:4] {
		l, err := m.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, l)
	}
	if _, err := sems[4].TryAcquire(ctx); !errors.Is(err, lockingcenter.ErrBusy) {
		t.Fatalf("a fifth holder of 4 places: %v", err)
	}
	for _, l := range first {
		l.Release()
	}

	var holders, most atomic.Int32
	var mu sync.Mutex
	tokens := map[uint64]bool{}
	var wg sync.WaitGroup
	for _, m := range sems {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				l, err := m.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				if tokens[l.Token()] {
					t.Errorf("token %d twice", l.Token())
				}
				tokens[l.Token()] = true
				mu.Unlock()
				holders.Add(-1)
				if err := l.Release(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// A holder counts from the grant's arrival to the release's sending,
	// within its time on the server: more than 4 here would be more than 4
	// there.
	if m := most.Load(); m > 4 {
		t.Fatalf("%d holders at once", m)
	}
}

// The places of a semaphore go round in the order of the requests: with
// every other session waiting whenever a place is given back, 16 sessions
// get counts within one of each other.
func TestSemaphoreFIFO(t *testing.T) {
	srv := startServer(t, serverOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const sessions, places, rounds = 16, 4, 100
	type grant struct {
		i    int
		lock *lockingcenter.Lock
	}
	granted := make(chan grant)
	again := make([]chan struct{}, sessions)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range sessions {
		again[i] = make(chan struct{})
		m := lockingcenter.NewSemaphore(srv.open(), "fifo", places)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l, err := m.Acquire(ctx)
				if err != nil {
					return
				}
				select {
				case granted <- grant{i, l}:
				case <-ctx.Done():
					return
				}
				select {
				case <-again[i]:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	counts := make([]int, sessions)
	var held []grant
	take := func() {
		g := receive(t, "a grant", granted)
		counts[g.i]++
		held = append(held, g)
	}
	for range places {
		take()
	}
	srv.waitQueue("fifo", sessions-places)
	for range rounds {
		// Give back the oldest place; its session asks again.
		oldest := 0
		for j, g := range held {
			if g.lock.Token() < held[oldest].lock.Token() {
				oldest = j
			}
		}
		g := held[oldest]
		held = append(held[:oldest], held[oldest+1:]...)
		if err := g.lock.Release(); err != nil {
			t.Fatal(err)
		}
		take()
		again[g.i] <- struct{}{}
		srv.waitQueue("fifo", sessions-places)
	}
	lo, hi := counts[0], counts[0]
	for _, n := range counts {
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi-lo > 1 {
		t.Fatalf("grants per session %v: from %d to %d", counts, lo, hi)
	}
}

// Every user of a semaphore's key must name the same number of places.
func TestSemaphoreLimitMismatch(t *testing.T) {
	srv := startServer(t, serverOptions{})
	ctx := context.Background()
	a, b := srv.open(), srv.open()
	if _, err := lockingcenter.NewSemaphore(a, "mm", 2).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := lockingcenter.NewSemaphore(b, "mm", 3).TryAcquire(ctx)
	var mm *lockingcenter.LimitMismatchError
	if !errors.Is(err, lockingcenter.ErrLimitMismatch) || !errors.As(err, &mm) || mm.Limit != 2 || mm.Key != "mm" {
		t.Fatalf("another limit: %v (%+v)", err, mm)
	}
	if _, err := b.Acquire(ctx, "mm", lockingcenter.TryOnce()); !errors.As(err, &mm) || mm.Limit != 2 {
		t.Fatalf("a plain acquire of a semaphore: %v", err)
	}
	if _, err := lockingcenter.NewSemaphore(b, "mm", 2).TryAcquire(ctx); err != nil {
		t.Fatalf("the same limit: %v", err)
	}
	if _, err := lockingcenter.NewSemaphore(b, "mm", 2).Acquire(ctx, lockingcenter.WithLimit(2)); !errors.Is(err, lockingcenter.ErrInvalidOption) {
		t.Fatalf("WithLimit on a semaphore: %v", err)
	}
}
