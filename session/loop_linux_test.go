//go:build linux

package session

import (
	"fmt"
	"testing"
	"time"
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
