package mutex

import (
	"fmt"
	"testing"
	"time"
)

// benchTable returns a table with waiting sessions: n sessions, session i
// holding key i and waiting for key i+1 (a chain of n waits ending at a
// v1 holder), plus the session that the benchmark's acquires come from,
// which holds a key of its own that a v1 request waits for (so that every
// check by its default owner walks the graph: a node that nobody waits
// for needs no walk).
func benchTable(b *testing.B, n int) (*Table, uint64, time.Time) {
	b.Helper()
	t := NewTable()
	now := time.Unix(1_800_000_000, 0)
	apply := func(c Command) Result {
		c.At = now
		r := t.Apply(&c)
		t.TakeEvents()
		return r
	}
	apply(Command{Op: OpAcquire, Key: fmt.Sprint("chain/", n), Source: "v1", Try: true})
	sessions := make([]uint64, n)
	for i := range n {
		sessions[i] = apply(Command{Op: OpOpenSession, Source: fmt.Sprint("s", i), TTL: time.Minute}).Session
		if r := apply(Command{Op: OpAcquire, Session: sessions[i], Request: 1, Key: fmt.Sprint("chain/", i)}); r.Status != StatusGranted {
			b.Fatalf("chain %d: %v", i, r.Status)
		}
	}
	for i := range n {
		if r := apply(Command{Op: OpAcquire, Session: sessions[i], Request: 2, Key: fmt.Sprint("chain/", i+1)}); r.Status != StatusParked {
			b.Fatalf("wait %d: %v", i, r.Status)
		}
	}
	me := apply(Command{Op: OpOpenSession, Source: "me", TTL: time.Minute}).Session
	apply(Command{Op: OpAcquire, Session: me, Request: 1, Key: "mine"})
	if r := apply(Command{Op: OpAcquire, Key: "mine", Source: "v1"}); r.Status != StatusParked {
		b.Fatalf("v1 waiter: %v", r.Status)
	}
	return t, me, now
}

// BenchmarkAcquireParks measures an acquire that parks and its cancel, by
// a session that holds a key (so the deadlock check runs), on a table with
// 0 or 10,000 other sessions waiting in a chain; with the chain, the
// request waits behind its head, so the check walks all of it, unless
// it comes from an owner of the session that holds nothing (nobody can
// be waiting for it: no walk).
func BenchmarkAcquireParks(b *testing.B) {
	for _, n := range []int{0, 10_000} {
		for _, into := range []string{"a key of its own", "the chain", "the chain, by an owner holding nothing"} {
			if n == 0 && into != "a key of its own" {
				continue
			}
			b.Run(fmt.Sprintf("waiting=%d/into=%s", n, into), func(b *testing.B) {
				t, me, now := benchTable(b, n)
				key := "held-elsewhere"
				owner := ""
				if into != "a key of its own" {
					key = "chain/0"
				} else {
					c := Command{Op: OpAcquire, At: now, Key: key, Source: "v1", Try: true}
					t.Apply(&c)
				}
				if into == "the chain, by an owner holding nothing" {
					owner = "other"
				}
				req := uint64(1)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					req++
					c := Command{Op: OpAcquire, At: now, Session: me, Request: req, Key: key, Owner: owner}
					if r := t.Apply(&c); r.Status != StatusParked {
						b.Fatalf("acquire: %v", r.Status)
					}
					req++
					cancel := Command{Op: OpCancel, At: now, Session: me, Request: req, Target: req - 1}
					t.Apply(&cancel)
					t.TakeEvents()
				}
			})
		}
	}
}

// BenchmarkDeadlockRefused measures an acquire that closes a cycle of
// 10,000 waits and is refused.
func BenchmarkDeadlockRefused(b *testing.B) {
	t, _, now := benchTable(b, 10_000)
	// The last session of the chain asks for the first key: a cycle.
	last := uint64(10_000)
	req := uint64(2)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		req++
		c := Command{Op: OpAcquire, At: now, Session: last, Request: req, Key: "chain/0"}
		if r := t.Apply(&c); r.Status != StatusDeadlock {
			b.Fatalf("acquire: %v", r.Status)
		}
		t.TakeEvents()
	}
}

// BenchmarkUncontendedCycle is one acquire and release of a free key by
// v1, the table's share of the cost of a cycle.
func BenchmarkUncontendedCycle(b *testing.B) {
	t := NewTable()
	now := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	for range b.N {
		c := Command{Op: OpAcquire, At: now, Key: "k", Source: "s"}
		t.Apply(&c)
		r := Command{Op: OpRelease, At: now, Key: "k"}
		t.Apply(&r)
		t.TakeEvents()
	}
}
