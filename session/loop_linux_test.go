//go:build linux

package session

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/locking-center/locking-center/internal/serve"
)

// noneBut reads what the poller did so far and fails on anything but the
// allowed.
func noneBut(t *testing.T, ch <-chan string, allowed ...string) {
	t.Helper()
	for {
		select {
		case got := <-ch:
			ok := false
			for _, a := range allowed {
				ok = ok || a == got
			}
			if !ok {
				t.Fatalf("poller: %q, want only %q", got, allowed)
			}
		default:
			return
		}
	}
}

// With the event loop a busy connection parks as soon as nothing is half
// read, whatever ParkAfter says, and the poller serves the frames that
// come whole itself: acquires, releases, a grant pushed to a parked
// waiter, several frames in one write answered in order. A read that ends
// inside a frame, and a CLOSE, go to a goroutine as before.
func TestEventLoopServesWholeFrames(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: time.Hour, EventLoop: true, Pollers: 1}})
	seen := watchPoller(t, e)
	a := e.hello(t, "a")
	await(t, seen, "parked")
	b := e.hello(t, "b")
	await(t, seen, "parked")

	for range 50 {
		a.release("k", a.granted(a.acquire("k")))
		await(t, seen, "served")
	}
	noneBut(t, seen, "served")

	tok := a.granted(a.acquire("k"))
	pid := b.acquire("k")
	eventually(t, "b waits", func() bool { return parked(e.node, "k") == 1 })
	a.release("k", tok)
	if got := b.granted(pid); got <= tok {
		t.Fatalf("token %d after %d", got, tok)
	}
	noneBut(t, seen, "served")

	// Three frames in one write, answered in order from the poller.
	first, second := b.id+1, b.id+2
	b.write(append(append(frameOf(TypeAcquire, first, func(fb *frameBuilder) { fb.str(TagKey, "x") }),
		frameOf(TypeAcquire, second, func(fb *frameBuilder) { fb.str(TagKey, "y") })...),
		frameOf(TypePing, b.id+3)...))
	b.id += 3
	b.granted(first)
	b.granted(second)
	if f := b.expect(TypeOK); f.ID != b.id {
		t.Fatalf("OK of id %d, want %d", f.ID, b.id)
	}
	await(t, seen, "served")

	// A frame cut in two: the first part goes to a goroutine, which
	// answers once the rest comes and parks the connection again.
	half := frameOf(TypeDescribe, b.id+1, func(fb *frameBuilder) { fb.str(TagKey, "x") })
	b.id++
	b.write(half[:7])
	await(t, seen, "unparked", "served") // a note of an earlier frame may come late
	b.write(half[7:])
	if f := b.expect(TypeInfo); f.ID != b.id {
		t.Fatalf("INFO of id %d, want %d", f.ID, b.id)
	}
	await(t, seen, "parked")

	// A CLOSE goes to a goroutine, which waits for its answer to be
	// written before the connection ends.
	close := b.send(TypeClose)
	await(t, seen, "unparked", "served")
	if f := b.expect(TypeOK); f.ID != close {
		t.Fatalf("OK of id %d, want %d", f.ID, close)
	}
	if !b.closed() {
		t.Fatal("the connection stayed open after CLOSE")
	}
	if len(e.node.Snapshot().Sessions) != 1 {
		t.Fatal("the CLOSE did not end b's session")
	}
}

// Without the event loop a connection that is busy keeps its goroutine.
func TestNoEventLoopKeepsGoroutine(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: time.Hour}})
	seen := watchPoller(t, e)
	a := e.hello(t, "a")
	await(t, seen, "parked")
	a.release("k", a.granted(a.acquire("k")))
	await(t, seen, "unparked")
	a.release("k", a.granted(a.acquire("k")))
	noneBut(t, seen)
}

// Connections are given to the pollers in turn, and each serves its own.
func TestEventLoopPollersShareConnections(t *testing.T) {
	e := start(t, envOptions{cfg: Config{EventLoop: true, Pollers: 2}})
	var cs []*client
	for i := range 4 {
		c := e.hello(t, fmt.Sprint("c", i))
		key := fmt.Sprint("k", i)
		c.release(key, c.granted(c.acquire(key)))
		cs = append(cs, c)
	}
	eventually(t, "every connection parked", func() bool { return parkedCount(e) == len(cs) })
	for i, p := range e.session.pollers {
		p.mu.Lock()
		n := len(p.conns)
		p.mu.Unlock()
		if n != 2 {
			t.Fatalf("poller %d holds %d connections, want 2", i, n)
		}
	}
	for _, c := range cs {
		c.release("k", c.granted(c.acquire("k")))
		if id := c.send(TypePing); c.expect(TypeOK).ID != id {
			t.Fatal("a PING's OK with another id")
		}
	}
}

// The poller holds the answers of the connections one take of the epoll
// set found ready until it has served them all (conn.hold): here eight
// clients write an ACQUIRE while the poller is stopped in its hook, so
// that its next take finds them all, and every one is granted; the
// buffers lent to hold their answers come back to the poller, so an idle
// connection keeps none.
func TestEventLoopHoldsAnswersToTheTakesEnd(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ParkAfter: time.Hour, EventLoop: true, Pollers: 1}})
	p := e.session.pollers[0]
	const n = 8
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = e.hello(t, fmt.Sprint("c", i))
	}
	eventually(t, "every connection parked", func() bool { return parkedCount(e) == n })

	// The poller stops on the first client's PING (heldTake), and not on
	// a note another goroutine makes, such as a connection's "parked".
	rooms := make(chan int, 1)
	heldTake(t, e, clients, 0, func(what string) { // on the poller's goroutine
		if what == "answered" { // the last PING's
			rooms <- len(p.rooms)
		}
	})
	// A note made after the take that served them: a PING read alone.
	clients[0].send(TypePing)
	clients[0].expect(TypeOK)
	if got := <-rooms; got < 2 {
		t.Fatalf("%d write buffers back with the poller after a take of %d ready connections, want at least 2", got, n)
	}
	p.mu.Lock()
	p.seen = nil
	p.mu.Unlock()
}

// What a held connection's writes keep leaves before anything written
// after: a pushed frame joins the held ones in order, unhold writes them
// all, and close writes what is held before the connection ends (a
// GOODBYE, say).
func TestHeldWritesKeepTheirOrder(t *testing.T) {
	e := start(t, envOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := newConn(e.session, nc, nil)
	r := &reader{c: peer}
	next := func() Frame {
		t.Helper()
		var f Frame
		if err := r.next(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}

	c.hold(make([]byte, 0, 64))
	c.send(okFrame(nil, 1))
	c.write(okFrame(nil, 2), 1, true)
	if got := c.backlog(); got != 2 {
		t.Fatalf("backlog %d while held, want 2", got)
	}
	if room := c.unhold(); cap(room) == 0 {
		t.Fatal("unhold kept the connection's buffer after writing it all")
	}
	if got := c.backlog(); got != 0 {
		t.Fatalf("backlog %d after unhold, want 0", got)
	}
	c.send(okFrame(nil, 3))
	for id := uint64(1); id <= 3; id++ {
		if f := next(); f.Type != TypeOK || f.ID != id {
			t.Fatalf("frame %#02x id %d, want OK id %d", uint8(f.Type), f.ID, id)
		}
	}

	c.hold(nil)
	c.send(goodbye(CodeProtocolError, "bye"))
	c.close()
	if f := next(); f.Type != TypeGoodbye {
		t.Fatalf("frame %#02x after close, want the GOODBYE held before it", uint8(f.Type))
	}
	var f Frame
	if err := r.next(&f); err == nil {
		t.Fatalf("frame %#02x after the GOODBYE, want the end", uint8(f.Type))
	}
}

// stopPoller stops e's only poller in its test hook, on its goroutine: a
// PING of a, parked, is answered there. It returns what lets the poller
// go on; until then the connections' bytes wait in the kernel.
func stopPoller(t *testing.T, e *env, a *client) (resume func()) {
	t.Helper()
	p := e.session.pollers[0]
	stopped, goOn := make(chan struct{}), make(chan struct{})
	var calls int
	p.mu.Lock()
	p.seen = func(what string) {
		if what == "answered" && calls == 0 { // the poller's: a's PING
			calls++
			close(stopped)
			<-goOn
		}
	}
	p.mu.Unlock()
	a.send(TypePing)
	<-stopped
	return func() {
		close(goOn)
		a.expect(TypeOK)
	}
}

// The epoll set is edge-triggered: it reports a connection once for each
// arrival of bytes, so what one read leaves behind must be asked for
// again (poller.rearm). Frames that fill the poller's buffer exactly, with
// more behind them, are all answered; and the end of a connection that
// came with its last frames is seen once they are answered.
func TestEdgeTriggeredSetLeavesNothingUnread(t *testing.T) {
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprint("event loop ", loop), func(t *testing.T) {
			e := start(t, envOptions{cfg: Config{ParkAfter: time.Millisecond, EventLoop: loop, Pollers: 1}})
			a, b := e.hello(t, "a"), e.hello(t, "b")
			eventually(t, "both connections parked", func() bool { return parkedCount(e) == 2 })

			if loop { // only the event loop serves a DESCRIBE without a goroutine
				// A DESCRIBE of two bytes' key (18 bytes) and 38 PINGs (13
				// bytes each) fill the buffer; 10 PINGs follow.
				burst := frameOf(TypeDescribe, b.id+1, func(fb *frameBuilder) { fb.str(TagKey, "kk") })
				for i := range 48 {
					burst = append(burst, frameOf(TypePing, b.id+2+uint64(i))...)
				}
				if len(burst) != pollRead+10*13 {
					t.Fatalf("burst of %d bytes", len(burst))
				}
				resume := stopPoller(t, e, a)
				b.write(burst) // in b's socket once the write returns (loopback)
				resume()
				if f := b.expect(TypeInfo); f.ID != b.id+1 {
					t.Fatalf("INFO of id %d, want %d", f.ID, b.id+1)
				}
				for i := range 48 {
					if f := b.expect(TypeOK); f.ID != b.id+2+uint64(i) {
						t.Fatalf("OK of id %d, want %d", f.ID, b.id+2+uint64(i))
					}
				}
				b.id += 49
				if parkedCount(e) != 2 {
					t.Fatalf("%d connections parked after the burst, want 2", parkedCount(e))
				}
			}

			resume := stopPoller(t, e, a)
			id := b.send(TypePing)
			if err := b.c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			resume()
			if f := b.expect(TypeOK); f.ID != id {
				t.Fatalf("OK of id %d, want %d", f.ID, id)
			}
			if !b.closed() {
				t.Fatal("the connection whose end came with its last PING is still open")
			}
		})
	}
}

// heldTake has one take of e's only poller find every client ready: the
// poller is stopped (stopPoller, on the first client's PING) while each
// client writes an ACQUIRE of a key of its own, round's. Once it goes
// on, every client must be granted. seen, if not nil, then hears what
// the poller does.
func heldTake(t *testing.T, e *env, clients []*client, round int, seen func(string)) {
	t.Helper()
	resume := stopPoller(t, e, clients[0])
	p := e.session.pollers[0]
	if seen != nil {
		p.mu.Lock()
		p.seen = seen // the poller is in the old hook: it reads p.seen anew for its next note
		p.mu.Unlock()
	}
	ids := make([]uint64, len(clients))
	for i, c := range clients {
		ids[i] = c.acquire(fmt.Sprint("round", round, "/k", i))
	}
	// A write on loopback may come to the server's socket after it
	// returns (the kernel's backlog of a busy machine): the next take
	// finds every connection ready only once each has its bytes.
	eventually(t, "every ACQUIRE in the server's sockets", func() bool { return unreadConns(e) == len(clients) })
	resume()
	for i, c := range clients {
		c.granted(ids[i])
	}
}

// unreadConns counts e's connections with bytes the server has not read
// (SIOCINQ), without taking them or the epoll set's reports.
func unreadConns(e *env) int {
	e.session.mu.Lock()
	defer e.session.mu.Unlock()
	n := 0
	for c := range e.session.conns {
		if c.raw == nil {
			continue
		}
		c.raw.Control(func(fd uintptr) {
			if queued, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil && queued > 0 {
				n++
			}
		})
	}
	return n
}

// The answers of a take leave in one call of the ring where the kernel
// offers io_uring, and with a call each with NoSendRing; in both, every
// client gets its own answers, take after take.
func TestHeldAnswersLeaveInOneCall(t *testing.T) {
	for _, each := range []bool{false, true} {
		t.Run(fmt.Sprint("NoSendRing=", each), func(t *testing.T) {
			e := start(t, envOptions{cfg: Config{ParkAfter: time.Hour, EventLoop: true, Pollers: 1, NoSendRing: each}})
			if !each && e.session.pollers[0].ring == nil {
				t.Skip("the kernel refuses io_uring here")
			}
			clients := make([]*client, 6)
			for i := range clients {
				clients[i] = e.hello(t, fmt.Sprint("c", i))
			}
			eventually(t, "every connection parked", func() bool { return parkedCount(e) == len(clients) })
			var together atomic.Int32
			count := func(what string) {
				if what == "sending together" {
					together.Add(1)
				}
			}
			for round := range 3 {
				heldTake(t, e, clients, round, count)
			}
			if got := together.Load(); each && got != 0 {
				t.Fatalf("%d calls of the ring with NoSendRing", got)
			} else if !each && got == 0 {
				t.Fatal("no answers sent in one call after three takes of six ready connections")
			}
		})
	}
}

// ringEnv starts a server whose one poller has a ring, with four
// clients parked, or skips the test where the kernel refuses io_uring.
func ringEnv(t *testing.T) (*env, *poller, []*client) {
	t.Helper()
	e := start(t, envOptions{cfg: Config{ParkAfter: time.Hour, EventLoop: true, Pollers: 1}})
	p := e.session.pollers[0]
	if p.ring == nil {
		t.Skip("the kernel refuses io_uring here")
	}
	clients := make([]*client, 4)
	for i := range clients {
		clients[i] = e.hello(t, fmt.Sprint("c", i))
	}
	eventually(t, "every connection parked", func() bool { return parkedCount(e) == len(clients) })
	return e, p, clients
}

// A ring whose call the kernel refuses is given up: the answers of that
// take are written one call each, as they are from then on, and none is
// lost or sent twice.
func TestRefusedRingFallsBack(t *testing.T) {
	e, p, clients := ringEnv(t)
	var calls atomic.Int32
	stop := stopPoller(t, e, clients[0])
	p.sendFn = func(fds []int, bufs [][]byte, n []int) (int, error) { // on the poller's goroutine, from the next take
		calls.Add(1)
		return 0, errors.New("refused")
	}
	stop()
	for round := range 3 {
		heldTake(t, e, clients, round, nil)
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("the refusing ring was called %d times, want once", got)
	}
}

// A socket that takes only part of what the ring sends it leaves the
// rest to the connection's drainer, ahead of anything written after.
func TestRingPartSentGoesToTheDrainer(t *testing.T) {
	e, p, clients := ringEnv(t)
	var parts atomic.Int32
	stop := stopPoller(t, e, clients[0])
	p.sendFn = func(fds []int, bufs [][]byte, n []int) (int, error) {
		for i, fd := range fds { // three bytes each: the socket took no more
			if n[i], _ = serve.WriteNow(fd, bufs[i][:3]); n[i] == 3 {
				parts.Add(1)
			}
		}
		return len(fds), nil
	}
	stop()
	for round := range 3 {
		heldTake(t, e, clients, round, nil)
		for _, c := range clients { // written after: behind the drained rest
			c.send(TypePing)
			c.expect(TypeOK)
		}
	}
	if parts.Load() == 0 {
		t.Fatal("no answer was cut by the ring")
	}
}
