package lockingcenter_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/session"
)

// startManager serves the management port of srv's node on 127.0.0.1
// until the test ends.
func startManager(t *testing.T, srv *lockServer) *manager.Client {
	t.Helper()
	m := manager.NewServer(srv.node, manager.Config{Logger: slog.New(slog.DiscardHandler)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		m.Close()
		<-done
	})
	return &manager.Client{Addr: ln.Addr().String()}
}

// Describe reports what the management port lists for every holder of a
// key (token, name, session, mode, count, held for, lease left) and the
// queue behind it; and a lock-delay as the table has it.
func TestSessionDescribe(t *testing.T) {
	clk := newFakeClock()
	srv := startServer(t, serverOptions{clock: clk})
	mc := startManager(t, srv)
	ctx := context.Background()
	a := srv.open(lockingcenter.WithSource("alpha"), lockingcenter.WithClock(newFakeClock()))
	b := srv.open(lockingcenter.WithSource("beta"), lockingcenter.WithClock(newFakeClock()))

	re := []lockingcenter.AcquireOption{lockingcenter.Reentrant(), lockingcenter.WithLease(5 * time.Second)}
	mustAcquire(t, a, "d/excl", re...)
	mustAcquire(t, a, "d/excl", re...)
	acquireAsync(ctx, b, "d/excl")
	srv.waitQueue("d/excl", 1)
	mustAcquire(t, a, "d/shared", lockingcenter.Shared())
	mustAcquire(t, b, "d/shared", lockingcenter.Shared())
	if _, _, err := srv.node.TryLock(mutex.Claim{Key: "d/v1", Source: "v1-client", RemoteAddr: "10.0.0.4:5000"}); err != nil {
		t.Fatal(err)
	}
	srv.advance(1500 * time.Millisecond)

	holders, err := mc.Holders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string][]manager.Holder{}
	for _, h := range holders {
		byKey[h.Key] = append(byKey[h.Key], h)
	}
	for _, key := range []string{"d/excl", "d/shared", "d/v1"} {
		info, err := a.Describe(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		want := byKey[key]
		if info.Key != key || len(info.Holders) != len(want) || info.DelayLeft != 0 {
			t.Fatalf("%s: %+v, the manager lists %+v", key, info, want)
		}
		for i, h := range info.Holders {
			m := want[i]
			lease := time.Duration(-1)
			if h.Leased {
				lease = h.LeaseLeft
			}
			if h.Token != m.Token || h.Name != m.Source || h.Session != m.Session || h.Shared != (m.Mode == mutex.Shared) ||
				h.Count != m.Count || h.HeldFor != m.Held || lease != m.Lease || info.Queue != m.Waiters {
				t.Errorf("%s holder %d: %+v (queue %d), the manager lists %+v", key, i, h, info.Queue, m)
			}
		}
	}
	// The values themselves, for one: two counts, 1.5 s held, 3.5 s left.
	info, _ := b.Describe(ctx, "d/excl")
	if h := info.Holders[0]; h.Name != "alpha" || h.Session != a.ID() || h.Count != 2 || h.HeldFor != 1500*time.Millisecond ||
		!h.Leased || h.LeaseLeft != 3500*time.Millisecond || h.Shared || info.Queue != 1 {
		t.Fatalf("d/excl: %+v", info)
	}

	// A lock lost to its lease leaves the key in its lock-delay.
	mustAcquire(t, b, "d/delay", lockingcenter.WithLease(time.Second), lockingcenter.WithLockDelay(2*time.Second))
	srv.advance(time.Second)
	srv.advance(500 * time.Millisecond)
	info, err = a.Describe(ctx, "d/delay")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 0 || info.DelayLeft != 1500*time.Millisecond || srv.node.Describe("d/delay").DelayLeft != info.DelayLeft {
		t.Fatalf("in lock-delay: %+v, the table says %v", info, srv.node.Describe("d/delay").DelayLeft)
	}
	if info, err := a.Describe(ctx, "d/free"); err != nil || len(info.Holders) != 0 || info.Queue != 0 {
		t.Fatalf("a free key: %+v, %v", info, err)
	}
	for _, key := range []string{"", strings.Repeat("k", 128)} {
		if _, err := a.Describe(ctx, key); !errors.Is(err, lockingcenter.ErrInvalidKey) {
			t.Fatalf("Describe of %d bytes: %v", len(key), err)
		}
	}
}

// Describe and Watch wait for their answers at most the read timeout.
func TestDescribeAndWatchReadTimeout(t *testing.T) {
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	s := srv.open(lockingcenter.WithDialer(tn.dial), lockingcenter.WithReadTimeout(50*time.Millisecond))
	tn.mute()
	if _, err := s.Describe(context.Background(), "rt/k"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Describe with no answer: %v", err)
	}
	if _, err := s.Watch(context.Background(), "rt/"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Watch with no answer: %v", err)
	}
}

// nextEvent returns the next event of w, failing after 30 s or when the
// watch ends.
func nextEvent(t *testing.T, w *lockingcenter.Watcher) lockingcenter.Event {
	t.Helper()
	ev, ok := receiveOK(t, "an event", w.Events())
	if !ok {
		t.Fatalf("the watch ended: %v", w.Err())
	}
	return ev
}

// expectEvent checks the next event of w.
func expectEvent(t *testing.T, w *lockingcenter.Watcher, want lockingcenter.Event) {
	t.Helper()
	if got := nextEvent(t, w); got != want {
		t.Fatalf("event %+v, want %+v", got, want)
	}
}

// receiveOK returns what ch delivers and whether it was open, failing
// after 30 s.
func receiveOK[T any](t *testing.T, what string, ch <-chan T) (T, bool) {
	t.Helper()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// A watch streams every event of the keys under its prefix, from every
// front end, with the holder's token, session, name and the server's
// time, and nothing of other keys; Close ends it.
func TestWatchPrefix(t *testing.T) {
	clk := newFakeClock()
	srv := startServer(t, serverOptions{clock: clk})
	ctx := context.Background()
	watcher := srv.open(lockingcenter.WithClock(newFakeClock()))
	a := srv.open(lockingcenter.WithSource("a"), lockingcenter.WithClock(newFakeClock()))
	b := srv.open(lockingcenter.WithSource("b"), lockingcenter.WithClock(newFakeClock()))
	w, err := watcher.Watch(ctx, "w/")
	if err != nil {
		t.Fatal(err)
	}
	at := func() time.Time { return time.UnixMilli(clk.Now().UnixMilli()) }
	ev := func(typ lockingcenter.EventType, key string, token uint64, s *lockingcenter.Session, name string) lockingcenter.Event {
		var id uint64
		if s != nil {
			id = s.ID()
		}
		return lockingcenter.Event{Type: typ, Key: key, Token: token, Session: id, Name: name, At: at()}
	}

	mustAcquire(t, a, "other/k") // not under the prefix
	mustAcquire(t, a, "w")       // nor this
	// x has the owner of the deadlock below.
	x := mustAcquire(t, a, "w/x", lockingcenter.WithOwner("task"))
	expectEvent(t, w, ev(lockingcenter.EventAcquired, "w/x", x.Token(), a, "a"))
	g, _, err := srv.node.TryLock(mutex.Claim{Key: "w/v1", Source: "v1-client"})
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, ev(lockingcenter.EventAcquired, "w/v1", g.Token, nil, "v1-client"))

	// A wait that runs out.
	timed := acquireAsync(ctx, b, "w/x", lockingcenter.WithWait(time.Second))
	srv.waitQueue("w/x", 1)
	srv.advance(time.Second)
	if got := receive(t, "the timed wait", timed); !errors.Is(got.err, lockingcenter.ErrTimeout) {
		t.Fatalf("timed wait: %v", got.err)
	}
	expectEvent(t, w, ev(lockingcenter.EventWithdrawn, "w/x", 0, b, "b"))

	// A wait that would deadlock: a waits for b's w/y, b asks for a's w/x.
	own := lockingcenter.WithOwner("task") // each session's acquires one owner, as x's
	y := mustAcquire(t, b, "w/y", own)
	expectEvent(t, w, ev(lockingcenter.EventAcquired, "w/y", y.Token(), b, "b"))
	aWaits := acquireAsync(ctx, a, "w/y", own)
	srv.waitQueue("w/y", 1)
	if _, err := b.Acquire(ctx, "w/x", own); !errors.Is(err, lockingcenter.ErrDeadlock) {
		t.Fatalf("closing a cycle: %v", err)
	}
	expectEvent(t, w, ev(lockingcenter.EventDeadlock, "w/x", 0, b, "b"))

	// A release hands the key on: released, then acquired.
	if err := y.Release(); err != nil {
		t.Fatal(err)
	}
	next := receive(t, "a's grant", aWaits)
	expectEvent(t, w, ev(lockingcenter.EventReleased, "w/y", y.Token(), b, "b"))
	expectEvent(t, w, ev(lockingcenter.EventAcquired, "w/y", next.lock.Token(), a, "a"))

	// A lease that runs out; a reset.
	l := mustAcquire(t, a, "w/lease", lockingcenter.WithLease(time.Second))
	expectEvent(t, w, ev(lockingcenter.EventAcquired, "w/lease", l.Token(), a, "a"))
	srv.advance(time.Second)
	expectEvent(t, w, ev(lockingcenter.EventExpired, "w/lease", l.Token(), a, "a"))
	srv.node.ResetKey("w/v1")
	expectEvent(t, w, ev(lockingcenter.EventReset, "w/v1", g.Token, nil, "v1-client"))

	w.Close()
	if ev, ok := receiveOK(t, "the end of the watch", w.Events()); ok {
		t.Fatalf("an event after Close: %+v", ev)
	}
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("Err after Close: %v", w.Err())
	}
	w.Close()
	if _, err := watcher.Watch(ctx, strings.Repeat("p", 128)); !errors.Is(err, lockingcenter.ErrInvalidKey) {
		t.Fatalf("a long prefix: %v", err)
	}
}

// Two watches of one session each get the events of their own prefix;
// the context of Watch bounds its watch.
func TestWatchTwoPrefixes(t *testing.T) {
	srv := startServer(t, serverOptions{})
	s, other := srv.open(), srv.open()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	some, err := s.Watch(context.Background(), "two/b")
	if err != nil {
		t.Fatal(err)
	}
	defer some.Close()
	mustAcquire(t, other, "two/a")
	mustAcquire(t, other, "two/b")
	if got := nextEvent(t, all); got.Key != "two/a" {
		t.Fatalf("every key: %+v", got)
	}
	if got := nextEvent(t, all); got.Key != "two/b" {
		t.Fatalf("every key: %+v", got)
	}
	if got := nextEvent(t, some); got.Key != "two/b" || got.Type != lockingcenter.EventAcquired {
		t.Fatalf("two/b: %+v", got)
	}
	cancel()
	if ev, ok := receiveOK(t, "the end of the watch", all.Events()); ok {
		t.Fatalf("an event after the context's end: %+v", ev)
	}
	if !errors.Is(all.Err(), context.Canceled) {
		t.Fatalf("Err after the context's end: %v", all.Err())
	}
}

// A watch goes on across a dropped connection: the events the server
// queued for the session while it was away come first, then EventGap
// where the watch was set up again, then what follows, none twice. After
// a restart of the server, which forgets its watches, the watch is set up
// again on the new one.
func TestWatchResumes(t *testing.T) {
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	s := srv.open(lockingcenter.WithDialer(tn.dial), lockingcenter.WithConnectTimeout(time.Second))
	other := srv.open()
	w, err := s.Watch(context.Background(), "rs/")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first := mustAcquire(t, other, "rs/before")
	if got := nextEvent(t, w); got.Key != "rs/before" || got.Token != first.Token() {
		t.Fatalf("before the drop: %+v", got)
	}

	tn.block()
	tn.cut()
	srv.waitDetached(s.ID())
	away := mustAcquire(t, other, "rs/away")
	tn.unblock()
	if got := nextEvent(t, w); got.Key != "rs/away" || got.Token != away.Token() {
		t.Fatalf("the event of the time away: %+v", got)
	}
	if got := nextEvent(t, w); got.Type != lockingcenter.EventGap || got.Key != "" {
		t.Fatalf("after the resume: %+v, want a gap", got)
	}
	after := mustAcquire(t, other, "rs/after")
	if got := nextEvent(t, w); got.Key != "rs/after" || got.Token != after.Token() {
		t.Fatalf("after the gap: %+v", got)
	}

	srv.stop()
	// Nobody watches while the front end is down.
	missed, _, err := srv.node.TryLock(mutex.Claim{Key: "rs/missed", Source: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	srv.serve(srv.addr)
	if got := nextEvent(t, w); got.Type != lockingcenter.EventGap {
		t.Fatalf("after the restart: %+v, want a gap", got)
	}
	restarted := mustAcquire(t, other, "rs/restarted")
	if got := nextEvent(t, w); got.Key != "rs/restarted" || got.Token != restarted.Token() {
		t.Fatalf("after the restart's gap: %+v (missed %d)", got, missed.Token)
	}
}

// A watch whose session falls 10,000 frames behind on the server (here
// while its connection is down) is dropped there: the stream ends with
// ErrSlowConsumer after the events the server kept.
func TestWatchSlowConsumer(t *testing.T) {
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	s := srv.open(lockingcenter.WithDialer(tn.dial))
	w, err := s.Watch(context.Background(), "sc/")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tn.block()
	tn.cut()
	srv.waitDetached(s.ID())
	const backlog = 10_000 // the server's bound, docs/protocol.md
	for range backlog/2 + 1 {
		if _, _, err := srv.node.TryLock(mutex.Claim{Key: "sc/k", Source: "v1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.node.Release("sc/k"); err != nil {
			t.Fatal(err)
		}
	}
	tn.unblock()
	got := 0
	for {
		ev, ok := receiveOK(t, "the events kept", w.Events())
		if !ok {
			break
		}
		if ev.Type == lockingcenter.EventGap {
			t.Fatal("a gap: the watch went on after the server dropped it")
		}
		got++
	}
	if !errors.Is(w.Err(), lockingcenter.ErrSlowConsumer) || got != backlog {
		t.Fatalf("the watch ended with %v after %d events, want ErrSlowConsumer after %d", w.Err(), got, backlog)
	}
	if s.Err() != nil {
		t.Fatalf("the session ended: %v", s.Err())
	}
}

// A watch ends with its session: Close, or an expiry on the server; Err
// says which, and Observe's channel closes too.
func TestWatchEndsWithSession(t *testing.T) {
	clk := newFakeClock()
	srv := startServer(t, serverOptions{clock: clk, cfg: session.Config{MinTTL: time.Second}})
	closing := srv.open()
	w, err := closing.Watch(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	closing.Close()
	if ev, ok := receiveOK(t, "the end of the watch", w.Events()); ok {
		t.Fatalf("an event after Close: %+v", ev)
	}
	if !errors.Is(w.Err(), lockingcenter.ErrSessionClosed) {
		t.Fatalf("Err after the session's Close: %v", w.Err())
	}
	if _, err := closing.Watch(context.Background(), ""); !errors.Is(err, lockingcenter.ErrSessionClosed) {
		t.Fatalf("Watch on a closed session: %v", err)
	}

	expiring := srv.open(lockingcenter.WithTTL(time.Second), lockingcenter.WithClock(newFakeClock()))
	w, err = expiring.Watch(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	leaders := lockingcenter.NewElection(expiring, "end/leader").Observe(context.Background())
	if l, ok := receiveOK(t, "the first leader", leaders); !ok || l.Token != 0 {
		t.Fatalf("Observe: %+v, %v", l, ok)
	}
	srv.advance(time.Second)
	if _, ok := receiveOK(t, "the end of Observe", leaders); ok {
		t.Fatal("Observe went on after its session expired")
	}
	if _, ok := receiveOK(t, "the end of the watch", w.Events()); ok {
		t.Fatal("the watch went on after its session expired")
	}
	if !errors.Is(w.Err(), lockingcenter.ErrSessionExpired) {
		t.Fatalf("Err after the session's expiry: %v", w.Err())
	}
}

// WithNote: the note is shown by Describe and in the grant's event; an
// invalid one is refused before anything is sent.
func TestNote(t *testing.T) {
	srv := startServer(t, serverOptions{})
	ctx := context.Background()
	a := srv.open(lockingcenter.WithSource("ci-7"))
	w, err := a.Watch(ctx, "deploy/")
	if err != nil {
		t.Fatal(err)
	}
	const note = "deploy 4.2 by ana · run 8812"
	l := mustAcquire(t, a, "deploy/prod", lockingcenter.WithNote(note))
	info, err := a.Describe(ctx, "deploy/prod")
	if err != nil || len(info.Holders) != 1 || info.Holders[0].Note != note || info.Holders[0].Token != l.Token() {
		t.Fatalf("Describe: %+v, %v", info, err)
	}
	if ev := nextEvent(t, w); ev.Type != lockingcenter.EventAcquired || ev.Note != note {
		t.Fatalf("event %+v", ev)
	}
	if got := srv.node.Describe("deploy/prod").Holders[0].Note; got != note {
		t.Fatalf("the table keeps the note %q", got)
	}
	for _, bad := range []string{"\xff", strings.Repeat("n", lockingcenter.MaxNoteLen+1)} {
		if _, err := a.Acquire(ctx, "deploy/bad", lockingcenter.WithNote(bad)); !errors.Is(err, lockingcenter.ErrInvalidNote) {
			t.Fatalf("a note of %d bytes: %v", len(bad), err)
		}
	}
	mustAcquire(t, a, "deploy/max", lockingcenter.WithNote(strings.Repeat("n", lockingcenter.MaxNoteLen)))
}
