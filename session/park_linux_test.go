//go:build linux

package session

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/serve"
	"github.com/locking-center/locking-center/mutex"
)

// watchPoller returns a channel of what e's poller does to connections
// (see poller.seen), from now on.
func watchPoller(t *testing.T, e *env) <-chan string {
	t.Helper()
	if len(e.session.pollers) != 1 {
		t.Fatalf("%d pollers, want one to watch", len(e.session.pollers))
	}
	p := e.session.pollers[0]
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
	n := 0
	for _, p := range e.session.pollers {
		p.mu.Lock()
		n += len(p.conns)
		p.mu.Unlock()
	}
	return n
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
	await(t, seen, "parked", "unparked", "answered", "ended") // a's end may come now
	for parkedCount(e) != 1 {
		await(t, seen, "parked", "unparked", "answered", "ended")
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
	if len(e.session.pollers) != 0 {
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

// The OK of a PING read while parked leaves after what the session owed
// before it: here a grant still on its way to the log. With the event
// loop too, where the poller serves the ACQUIRE itself.
func TestParkedPingAfterOwed(t *testing.T) {
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprint("event loop ", loop), func(t *testing.T) {
			j := &heldJournal{}
			e := start(t, envOptions{journal: j, cfg: Config{ParkAfter: time.Millisecond, EventLoop: loop, Pollers: 1}})
			seen := watchPoller(t, e)
			c := e.hello(t, "c")
			await(t, seen, "parked")
			j.hold()
			id := c.acquire("k")
			if loop {
				await(t, seen, "served") // the grant waits for the log
			} else {
				await(t, seen, "unparked")
				await(t, seen, "parked") // the grant waits for the log
			}
			ping := c.send(TypePing)
			for got := ""; got != "answered" && got != "unparked" && got != "served"; {
				got = <-seen
			}
			j.release()
			c.granted(id)
			if f := c.expect(TypeOK); f.ID != ping {
				t.Fatalf("OK of id %d, want %d", f.ID, ping)
			}
		})
	}
}

// A connection closed (here: resumed elsewhere) while its goroutine is
// about to park is ended all the same: a close that found it not yet
// parked must not let it park, or its descriptor would leave the epoll
// set when closed, with no event, and the connection would stay
// counted for ever.
func TestCloseWhileParking(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: time.Hour}})
	p := e.session.pollers[0]
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
	for _, p := range s.pollers {
		p.mu.Lock()
		for _, c := range p.conns {
			if c.remote == remote {
				p.mu.Unlock()
				return true
			}
		}
		p.mu.Unlock()
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

// parkedAgain waits until e's only connection is parked, and then empties
// seen of what came before.
func parkedAgain(t *testing.T, e *env, seen <-chan string) {
	t.Helper()
	for parkedCount(e) != 1 {
		await(t, seen, "parked", "unparked", "answered")
	}
	for {
		select {
		case <-seen:
		default:
			return
		}
	}
}

// servedOf waits for the poller to read what was just written: it
// answered it, or gave the connection back to a goroutine.
func servedOf(t *testing.T, seen <-chan string) {
	t.Helper()
	for {
		switch got := <-seen; got {
		case "answered", "unparked":
			return
		case "parked":
		default:
			t.Fatalf("poller: %q", got)
		}
	}
}

// Pipelined frames that reach a parked connection in two pieces, cut at
// every byte, are each answered once and in order: PINGs alone, a PING
// with a field, part of a PING, a DESCRIBE among them.
func TestParkedSplitAtEveryByte(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: time.Millisecond}})
	seen := watchPoller(t, e)
	c := e.hello(t, "c")
	for cut := 1; ; cut++ {
		parkedAgain(t, e, seen)
		base := c.id
		var b []byte
		b = append(b, frameOf(TypePing, base+1)...)
		b = append(b, frameOf(TypePing, base+2)...)
		b = append(b, frameOf(TypeDescribe, base+3, func(fb *frameBuilder) { fb.str(TagKey, "k") })...)
		b = append(b, frameOf(TypePing, base+4, func(fb *frameBuilder) { fb.u8(0xEE, 1) })...)
		b = append(b, frameOf(TypePing, base+5)...)
		if cut >= len(b) {
			break
		}
		c.write(b[:cut])
		servedOf(t, seen)
		c.write(b[cut:])
		for i := uint64(1); i <= 5; i++ {
			f := c.read()
			want := TypeOK
			switch i {
			case 3:
				want = TypeInfo
			case 4:
				want = TypeRefused
			}
			if f.Type != want || f.ID != base+i {
				t.Fatalf("cut at %d: frame %#02x id %d, want %#02x id %d", cut, uint8(f.Type), f.ID, uint8(want), base+i)
			}
		}
		c.id = base + 5
	}
}

// A protocol error, or a frame of the largest size, reaching a parked
// connection is handled as on any other: GOODBYE protocol_error; an
// answer to the frame.
func TestParkedBadAndLargeFrames(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: time.Millisecond}})
	seen := watchPoller(t, e)

	c := e.hello(t, "large")
	parkedAgain(t, e, seen)
	// A DESCRIBE of MaxFrame bytes: a key over its limit, and padding
	// in an unknown field, refused unsupported, then a PING.
	pad := make([]byte, MaxFrame-9-3-3-1)
	big := frameOf(TypeDescribe, 1, func(fb *frameBuilder) { fb.u8(0xEE, 0) }, func(fb *frameBuilder) { fb.bytes(0xEF, pad[:min(len(pad), 65535)]) })
	if len(big) > 4+MaxFrame {
		t.Fatalf("frame of %d bytes", len(big))
	}
	c.write(append(big, frameOf(TypePing, 2)...))
	c.expectRefused(1, CodeUnsupported)
	if f := c.expect(TypeOK); f.ID != 2 {
		t.Fatalf("OK of %d", f.ID)
	}
	parkedAgain(t, e, seen)

	// A frame over MaxFrame, and then an unknown frame type.
	for _, bad := range [][]byte{{0, 1, 0, 1}, frameOf(Type(0x7E), 3)} {
		d := e.hello(t, "bad")
		for parkedCount(e) != 2 {
			await(t, seen, "parked", "unparked", "answered")
		}
		d.write(bad)
		d.expectGoodbye(CodeProtocolError)
		eventually(t, "bad forgotten", func() bool { return !e.serves(d) })
	}
}

// A parked connection holds its slot of the port's gate, and gives it
// back when it ends: closed by its client, resumed elsewhere, closed at
// a protocol error.
func TestParkedConnectionHoldsItsSlot(t *testing.T) {
	gate := serve.NewGate(2, 0)
	e := start(t, envOptions{gate: gate, cfg: Config{ParkAfter: time.Millisecond}})
	seen := watchPoller(t, e)
	a := e.hello(t, "a")
	b := e.hello(t, "b")
	for parkedCount(e) != 2 {
		await(t, seen, "parked", "unparked", "answered")
	}
	if gate.Open() != 2 {
		t.Fatalf("%d slots taken by 2 parked connections", gate.Open())
	}
	// A third is refused: GOODBYE over_limit when its preface was in at
	// accept time, else just closed.
	full := e.dial(t)
	full.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var f Frame
	if err := full.r.next(&f); err == nil {
		if code, _ := f.Uint(TagCode); f.Type != TypeGoodbye || Code(code) != CodeOverLimit {
			t.Fatalf("frame %#02x code %v to a connection over the limit", uint8(f.Type), Code(code))
		}
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("a connection over the limit stays open")
	}

	a.c.Close()
	eventually(t, "a's slot back", func() bool { return gate.Open() == 1 })
	r := e.dial(t) // takes a's slot, and b's session
	r.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, b.sid) }, func(fb *frameBuilder) { fb.bytes(TagSecret, b.sec) })
	r.expect(TypeWelcome)
	b.expectGoodbye(CodeSessionEnded)
	eventually(t, "b's slot back", func() bool { return gate.Open() == 1 })
	for parkedCount(e) != 1 {
		await(t, seen, "parked", "unparked", "answered", "ended")
	}
	r.write([]byte{0, 0, 0, 1})
	r.expectGoodbye(CodeProtocolError)
	eventually(t, "every slot back", func() bool { return gate.Open() == 0 })
}

// soloLog is the replicated log of a cluster of one node, in memory: one
// goroutine applies its entries in order. Its node leads from start.
type soloLog struct {
	work chan soloEntry
}

type soloEntry struct {
	c    mutex.Command
	done chan struct{}
}

const soloLeader = "10.0.0.7:7000"

// start applies the log to n until the test ends, and makes n lead.
func (l *soloLog) start(t testing.TB, n *mutex.Node) {
	l.work = make(chan soloEntry, 1024)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		index := uint64(0)
		for e := range l.work {
			index++
			n.ApplyCommitted(&e.c, index)
			close(e.done)
		}
	}()
	t.Cleanup(func() { close(l.work); <-stopped })
	n.SetLeader(true)
}

func (l *soloLog) Propose(c *mutex.Command) func() error {
	e := soloEntry{c: *c, done: make(chan struct{})}
	l.work <- e
	return func() error { <-e.done; return nil }
}

func (l *soloLog) VerifyLeader() error { return nil }
func (l *soloLog) Linearize() error    { return nil }
func (l *soloLog) Leader() string      { return soloLeader }

// removedLog is the log of a node removed from its cluster: it knows no
// leader, and says it was removed.
type removedLog struct{ soloLog }

func (*removedLog) Leader() string { return "" }
func (*removedLog) Removed() bool  { return true }

// start applies the log to n, which does not lead.
func (l *removedLog) start(t testing.TB, n *mutex.Node) {
	l.soloLog.start(t, n)
	n.SetLeader(false)
}

// A node removed from its cluster says so to a session client, instead of
// that no leader is known yet.
func TestRemovedNodeSaysSo(t *testing.T) {
	e := start(t, envOptions{rep: &removedLog{}})
	c := e.dial(t)
	c.send(TypeHello, func(fb *frameBuilder) { fb.str(TagName, "c") })
	f := c.expect(TypeGoodbye)
	code, _ := f.Uint(TagCode)
	msg, _ := f.Get(TagMessage)
	if Code(code) != CodeNotLeader || !strings.Contains(string(msg), "removed from its cluster") {
		t.Fatalf("GOODBYE %v %q, want not_leader saying the node was removed", Code(code), msg)
	}
}

// expectNotLeader reads a GOODBYE not_leader naming soloLeader, and the
// connection's end.
func (c *client) expectNotLeader() {
	c.t.Helper()
	f := c.expect(TypeGoodbye)
	code, _ := f.Uint(TagCode)
	leader, _ := f.Get(TagLeader)
	if Code(code) != CodeNotLeader || string(leader) != soloLeader {
		c.t.Fatalf("GOODBYE %v leader %q, want not_leader %q", Code(code), leader, soloLeader)
	}
	if !c.closed() {
		c.t.Fatal("the connection stays open after GOODBYE")
	}
}

// A node of a cluster that no longer leads answers a PING on a parked
// connection GOODBYE not_leader, as a connection's goroutine would, and
// LeaderLost ends its parked connections so.
func TestParkedFollower(t *testing.T) {
	e := start(t, envOptions{rep: &soloLog{}, cfg: Config{ParkAfter: time.Millisecond}})
	seen := watchPoller(t, e)
	a := e.hello(t, "a")
	b := e.hello(t, "b")
	for parkedCount(e) != 2 {
		await(t, seen, "parked", "unparked", "answered")
	}
	a.send(TypePing)
	if f := a.expect(TypeOK); f.ID != a.id {
		t.Fatalf("OK of %d", f.ID)
	}

	e.node.SetLeader(false) // and LeaderLost not yet called
	a.send(TypePing)
	a.expectNotLeader()
	eventually(t, "a forgotten", func() bool { return !e.serves(a) })

	for parkedCount(e) != 1 {
		await(t, seen, "parked", "unparked", "answered", "ended")
	}
	e.session.LeaderLost()
	b.expectNotLeader()
	eventually(t, "b forgotten", func() bool { return !e.serves(b) })
}

// A connection given back its goroutine soon after it parked (its read
// deadline moved on a moment before) parks again once idle for
// ParkAfter: it does not read on without a deadline.
func TestParksAgainSoonAfterUnpark(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: 2 * time.Second}})
	seen := watchPoller(t, e)
	c := e.hello(t, "c")
	await(t, seen, "parked")
	describe := func() {
		c.send(TypeDescribe, func(fb *frameBuilder) { fb.str(TagKey, "k") })
		c.expect(TypeInfo)
	}
	describe() // a goroutine, which reads under a deadline
	await(t, seen, "unparked")
	c.send(TypePing) // read by that goroutine: the connection parks
	c.expect(TypeOK)
	await(t, seen, "parked")
	describe() // a goroutine again, within half of ParkAfter
	await(t, seen, "unparked")
	await(t, seen, "parked") // after ParkAfter
}

// Parked connections that their clients reset while grants are pushed to
// them, that are resumed elsewhere, or that send a last frame, all end:
// none stays counted, in the gate, the server or the poller.
func TestParkedConnectionsEndUnderChurn(t *testing.T) {
	gate := serve.NewGate(1000, 0)
	e := start(t, envOptions{gate: gate, cfg: Config{ParkAfter: time.Millisecond}})
	holder := e.hello(t, "holder")
	tok := holder.granted(holder.acquire("k"))
	const n = 30
	waiters := make([]*client, n)
	for i := range waiters {
		waiters[i] = e.hello(t, "w")
		waiters[i].acquire("k")
	}
	eventually(t, "all wait", func() bool { return parked(e.node, "k") == n })
	var wg sync.WaitGroup
	for i, w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % 3 {
			case 0: // reset
				w.c.(*net.TCPConn).SetLinger(0)
				w.c.Close()
			case 1: // resumed elsewhere
				c, err := net.Dial("tcp", e.addr)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				c.Write([]byte(Preface))
				c.Write(frameOf(TypeResume, 0, func(fb *frameBuilder) { fb.u64(TagSession, w.sid) }, func(fb *frameBuilder) { fb.bytes(TagSecret, w.sec) }))
				c.Close()
			case 2: // a PING, a frame cut short, then the end
				w.c.Write(append(frameOf(TypePing, 100), 0, 0))
				w.c.Close()
			}
		}()
	}
	// Grants pushed to them meanwhile: each waiter in turn gets the key
	// and loses it when its session is closed below, or holds it.
	holder.release("k", tok)
	wg.Wait()
	for _, w := range waiters {
		w.c.Close()
	}
	eventually(t, "only the holder left", func() bool {
		e.session.mu.Lock()
		defer e.session.mu.Unlock()
		return len(e.session.conns) == 1 && parkedCount(e) <= 1 && gate.Open() == 1
	})
}

// A frame queued for a parked connection while the poller writes the OKs
// of its PINGs (here the GOODBYE of the session's expiry) leaves after
// them: nothing may follow a GOODBYE.
func TestPollerAnswerPrecedesWhatIsQueuedMeanwhile(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: time.Millisecond}})
	seen := watchPoller(t, e)
	c := e.hello(t, "c")
	await(t, seen, "parked", "unparked")
	queued := make(chan struct{})
	hook := func(s *sess) {
		sendFirstHook.Store(nil) // once
		s.queueRaw(goodbye(CodeSessionExpired, "the session expired"))
		s.closeAfterFlush()
		close(queued)
	}
	sendFirstHook.Store(&hook)
	t.Cleanup(func() { sendFirstHook.Store(nil) })
	c.write(frameOf(TypePing, c.id+1))
	<-queued
	if f := c.expect(TypeOK); f.ID != c.id+1 {
		t.Fatalf("OK of id %d, want %d", f.ID, c.id+1)
	}
	c.expectGoodbye(CodeSessionExpired)
}
