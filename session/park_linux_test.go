//go:build linux

package session

import (
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// watchPoller returns a channel of what e's poller does to connections
// (see poller.seen), from now on.
func watchPoller(t *testing.T, e *env) <-chan string {
	t.Helper()
	p := e.session.park
	if p == nil {
		t.Fatal("no poller")
	}
	ch, done := make(chan string, 1024), make(chan struct{})
	t.Cleanup(func() { close(done) }) // before the server's Close
	p.mu.Lock()
	p.seen = func(what string) {
		select {
		case ch <- what:
		case <-done:
		}
	}
	p.mu.Unlock()
	return ch
}

// await reads from ch until what comes, and fails on anything else that
// is not allowed, or after 30 s.
func await(t *testing.T, ch <-chan string, what string, allowed ...string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == what {
				return
			}
			ok := false
			for _, a := range allowed {
				ok = ok || a == got
			}
			if !ok {
				t.Fatalf("poller: %q while waiting for %q", got, what)
			}
		case <-timeout:
			t.Fatalf("poller: no %q in 30 s", what)
		}
	}
}

// parkedCount returns how many connections e's poller holds.
func parkedCount(e *env) int {
	p := e.session.park
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// An idle connection parks; the poller answers its PINGs without giving
// it a goroutine, and gives it one back for any other frame, after which
// it parks again; a grant made while it is parked reaches it.
func TestParkedConnectionIsServed(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: time.Millisecond}})
	seen := watchPoller(t, e)
	holder := e.hello(t, "holder")
	await(t, seen, "parked")
	c := e.hello(t, "c")
	await(t, seen, "parked", "unparked")
	for parkedCount(e) != 2 {
		await(t, seen, "parked", "unparked", "answered")
	}

	// Three PINGs in one write: answered by the poller, in order.
	var pings []byte
	for i := range uint64(3) {
		pings = append(pings, frameOf(TypePing, c.id+1+i)...)
	}
	c.write(pings)
	for i := range uint64(3) {
		if f := c.expect(TypeOK); f.ID != c.id+1+i {
			t.Fatalf("OK of id %d, want %d", f.ID, c.id+1+i)
		}
	}
	c.id += 3
	await(t, seen, "answered")
	if parkedCount(e) != 2 {
		t.Fatalf("%d parked after the PINGs, want 2", parkedCount(e))
	}

	// An ACQUIRE takes the connection back; it parks again once idle.
	tok := holder.granted(holder.acquire("k"))
	await(t, seen, "unparked", "parked")
	pid := c.acquire("k")
	eventually(t, "c waits", func() bool { return parked(e.node, "k") == 1 })
	for parkedCount(e) != 2 {
		await(t, seen, "parked", "unparked", "answered")
	}
	// The grant is pushed to a parked connection.
	holder.release("k", tok)
	got := c.granted(pid)
	if got <= tok {
		t.Fatalf("token %d after %d", got, tok)
	}
	c.release("k", got)
	if e.node.Len() != 0 {
		t.Fatal("keys left")
	}
}

// A parked connection that its client closes, that another connection
// resumes, or whose session expires, is ended: the server forgets it and
// the session is left without it.
func TestParkedConnectionEnds(t *testing.T) {
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	e := start(t, envOptions{clock: clk, cfg: Config{ParkAfter: time.Millisecond}})
	seen := watchPoller(t, e)
	conns := func() int {
		e.session.mu.Lock()
		defer e.session.mu.Unlock()
		return len(e.session.conns)
	}

	// Closed by its client.
	a := e.hello(t, "a")
	await(t, seen, "parked", "unparked")
	a.c.Close()
	eventually(t, "a forgotten", func() bool { return conns() == 0 && parkedCount(e) == 0 })
	if s := e.node.Snapshot().Sessions; len(s) != 1 || s[0].RemoteAddr != "" {
		t.Fatalf("sessions %+v, want a left without a connection", s)
	}

	// Resumed on another connection: the parked one is told and closed.
	b := e.hello(t, "b")
	await(t, seen, "parked", "unparked", "answered")
	for parkedCount(e) != 1 {
		await(t, seen, "parked", "unparked", "answered")
	}
	r := e.dial(t)
	r.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, b.sid) }, func(fb *frameBuilder) { fb.bytes(TagSecret, b.sec) })
	r.expect(TypeWelcome)
	if g := b.expect(TypeGoodbye); func() Code { c, _ := g.Uint(TagCode); return Code(c) }() != CodeSessionEnded {
		t.Fatalf("old connection: %+v", g)
	}
	if !b.closed() {
		t.Fatal("the old connection stays open")
	}
	eventually(t, "one connection left", func() bool { return conns() == 1 })

	// Expired while parked: GOODBYE session_expired, then closed.
	for parkedCount(e) != 1 {
		await(t, seen, "parked", "unparked", "answered", "ended")
	}
	clk.add(time.Hour)
	e.node.Advance()
	if g := r.expect(TypeGoodbye); func() Code { c, _ := g.Uint(TagCode); return Code(c) }() != CodeSessionExpired {
		t.Fatalf("expired: %+v", g)
	}
	if !r.closed() {
		t.Fatal("the expired session's connection stays open")
	}
	eventually(t, "nothing left", func() bool { return conns() == 0 && parkedCount(e) == 0 })
}

// With ParkAfter negative no connection parks.
func TestNeverPark(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: -1}})
	if e.session.park != nil {
		t.Fatal("a poller without parking")
	}
	c := e.hello(t, "c")
	c.granted(c.acquire("k"))
}

// BenchmarkParkedPing is a PING and its OK on a parked connection: the
// allocations it reports are the server's and this client's.
func BenchmarkParkedPing(b *testing.B) {
	e := start(b, envOptions{cfg: Config{ParkAfter: time.Microsecond}})
	c := e.hello(b, "bench")
	ping := frameOf(TypePing, 0)
	var f Frame
	b.ReportAllocs()
	for b.Loop() {
		c.id++
		binary.BigEndian.PutUint64(ping[5:13], c.id)
		if _, err := c.c.Write(ping); err != nil {
			b.Fatal(err)
		}
		if err := c.r.next(&f); err != nil || f.Type != TypeOK || f.ID != c.id {
			b.Fatalf("frame %#02x id %d (%v)", uint8(f.Type), f.ID, err)
		}
	}
}

// heldJournal makes every command durable at once until hold, and from
// then on holds them all until release.
type heldJournal struct {
	mu   sync.Mutex
	done chan struct{} // nil: durable at once
}

func (j *heldJournal) Append(*mutex.Command) mutex.Pending {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.done == nil {
		return nil
	}
	return heldPending(j.done)
}

func (j *heldJournal) hold() {
	j.mu.Lock()
	j.done = make(chan struct{})
	j.mu.Unlock()
}

func (j *heldJournal) release() {
	j.mu.Lock()
	close(j.done)
	j.done = nil
	j.mu.Unlock()
}

type heldPending chan struct{}

func (p heldPending) Done() <-chan struct{} { return p }
func (p heldPending) Wait() error           { <-p; return nil }

// The OK of a PING read while parked leaves after what the session owed
// before it: here a grant still on its way to the log.
func TestParkedPingAfterOwed(t *testing.T) {
	j := &heldJournal{}
	e := start(t, envOptions{journal: j, cfg: Config{ParkAfter: time.Millisecond}})
	seen := watchPoller(t, e)
	c := e.hello(t, "c")
	await(t, seen, "parked")
	j.hold()
	id := c.acquire("k")
	await(t, seen, "unparked")
	await(t, seen, "parked") // the grant waits for the log
	ping := c.send(TypePing)
	for got := ""; got != "answered" && got != "unparked"; {
		got = <-seen
	}
	j.release()
	c.granted(id)
	if f := c.expect(TypeOK); f.ID != ping {
		t.Fatalf("OK of id %d, want %d", f.ID, ping)
	}
}

// A connection closed (here: resumed elsewhere) while its goroutine is
// about to park is ended all the same: a close that found it not yet
// parked must not let it park, or its descriptor would leave the epoll
// set when closed, with no event, and the connection would stay
// counted for ever.
func TestCloseWhileParking(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: time.Hour}})
	p := e.session.park
	closing, settled := make(chan struct{}), make(chan struct{})
	var closingOnce, settledOnce sync.Once
	p.mu.Lock()
	p.seen = func(what string) {
		switch what {
		case "closing": // in close, between its look at the poller and the descriptor's close
			closingOnce.Do(func() { close(closing); <-settled })
		case "parked", "refused":
			select {
			case <-closing:
				settledOnce.Do(func() { close(settled) })
			default:
			}
		}
	}
	p.mu.Unlock()
	b := e.hello(t, "b") // parks: its first batch is its HELLO
	eventually(t, "b parked", func() bool { return parkedCount(e) == 1 })
	// A DESCRIBE gives b a goroutine back, which then reads (for an hour).
	b.send(TypeDescribe, func(fb *frameBuilder) { fb.str(TagKey, "k") })
	b.expect(TypeInfo)
	eventually(t, "b unparked", func() bool { return parkedCount(e) == 0 })

	r := e.dial(t)
	r.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, b.sid) }, func(fb *frameBuilder) { fb.bytes(TagSecret, b.sec) })
	<-closing
	// b's goroutine reads a PING only: it tries to park while b is closed.
	b.id = 100
	b.send(TypePing)
	r.expect(TypeWelcome)
	b.expect(TypeGoodbye)
	if !b.closed() {
		t.Fatal("b stays open")
	}
	eventually(t, "b forgotten", func() bool { return !e.serves(b) })
}

// serves reports whether e's session server holds cl's connection, in
// its connections or parked.
func (e *env) serves(cl *client) bool {
	remote := cl.c.LocalAddr().String()
	s := e.session
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.remote == remote {
			return true
		}
	}
	if s.park != nil {
		s.park.mu.Lock()
		defer s.park.mu.Unlock()
		for _, c := range s.park.conns {
			if c.remote == remote {
				return true
			}
		}
	}
	return false
}

// Closing the server stops its poller without an error in the log.
func TestPollerClosesQuietly(t *testing.T) {
	var logs strings.Builder
	node := mutex.NewNode(mutex.NodeConfig{})
	defer node.Close()
	s, err := NewServer(node, Config{ParkAfter: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	s.Close() // the poller's goroutine is running, or yet to run: both end quietly
	if logs.Len() > 0 {
		t.Fatalf("logged at Close: %s", logs.String())
	}
}
