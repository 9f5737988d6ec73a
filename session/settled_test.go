package session

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/locking-center/locking-center/oneshot"
	"github.com/locking-center/locking-center/store"
)

// Request ids: HELLO's is not counted, so the first request may take any
// id from 1; 0 is refused bad_request (never duplicate, which would say
// that it took effect).
func TestRequestIDs(t *testing.T) {
	e := start(t, envOptions{})
	c := e.dial(t)
	c.id = 99
	c.send(TypeHello, func(fb *frameBuilder) { fb.str(TagName, "ids") })
	c.expect(TypeWelcome)
	key := func(fb *frameBuilder) { fb.str(TagKey, "k") }
	token := func(fb *frameBuilder) { fb.u64(TagToken, 1) }
	for typ, fields := range map[Type][]func(*frameBuilder){TypeAcquire: {key}, TypeRelease: {key, token},
		TypeRenew: {key, token}, TypeCancel: {func(fb *frameBuilder) { fb.u64(TagTarget, 1) }}, TypeClose: nil} {
		c.write(frameOf(typ, 0, fields...))
		c.expectRefused(0, CodeBadRequest)
	}
	c.id = 0
	c.granted(c.acquire("k")) // id 1, below the HELLO's
	if len(e.node.Snapshot().Sessions) != 1 {
		t.Fatal("a refused CLOSE ended the session")
	}
}

// docs/protocol.md, Acquire: ttl_ms 0 is the default TTL; delay_ms over
// 60 s is refused, not cut; shared takes no limit above 1.
func TestAcquireFieldRanges(t *testing.T) {
	e := start(t, envOptions{})
	e.hello(t, "zero", ttl(0))
	if s := e.node.Snapshot().Sessions[0]; s.TTL != DefaultTTL {
		t.Fatalf("ttl_ms 0 gave a TTL of %v, want the default %v", s.TTL, DefaultTTL)
	}
	c := e.hello(t, "ranges")
	c.expectRefused(c.acquire("k", delay(60_001)), CodeBadRequest)
	shared := func(fb *frameBuilder) { fb.u8(TagMode, 1) }
	limit := func(n uint32) func(*frameBuilder) { return func(fb *frameBuilder) { fb.u32(TagLimit, n) } }
	c.expectRefused(c.acquire("k", shared, limit(2)), CodeBadRequest)
	c.release("k", c.granted(c.acquire("k", shared, limit(1))))
	tok := c.granted(c.acquire("k", delay(60_000)))
	if e.node.Describe("k").Holders[0].Token != tok {
		t.Fatal("k is not held")
	}
}

// Leases: lease_ms 0 on ACQUIRE is no lease; a RENEW without lease_ms, or
// with 0, gives the lock its last lease again; a RENEW of a lock without a
// lease is OK without left_ms, and one with lease_ms gives it that lease.
// A token of another session's lock is stale.
func TestLeaseZeroAndRenew(t *testing.T) {
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	e := start(t, envOptions{clock: clk})
	c := e.hello(t, "leases")
	renew := func(key string, tok uint64, fields ...func(*frameBuilder)) Frame {
		t.Helper()
		id := c.send(TypeRenew, append([]func(*frameBuilder){func(fb *frameBuilder) { fb.str(TagKey, key) },
			func(fb *frameBuilder) { fb.u64(TagToken, tok) }}, fields...)...)
		f := c.expect(TypeOK)
		if f.ID != id {
			t.Fatalf("OK of id %d, want %d", f.ID, id)
		}
		return f
	}
	left := func(f Frame) (uint64, bool) { return f.Uint(TagLeft) }

	id := c.acquire("none", lease(0))
	g := c.expect(TypeGranted)
	if _, ok := left(g); ok || g.ID != id || e.node.Describe("none").Holders[0].Leased {
		t.Fatal("lease_ms 0 gave the lock a lease")
	}
	tokNone, _ := g.Uint(TagToken)
	if _, ok := left(renew("none", tokNone)); ok {
		t.Fatal("a RENEW of a lock without a lease carries left_ms")
	}
	if ms, ok := left(renew("none", tokNone, lease(4000))); !ok || ms != 4000 {
		t.Fatalf("RENEW lease_ms 4000 of a lock without a lease: left_ms %d %v", ms, ok)
	}

	tok := c.granted(c.acquire("leased", lease(30_000)))
	clk.add(10 * time.Second)
	for _, f := range [][]func(*frameBuilder){nil, {lease(0)}} {
		if ms, ok := left(renew("leased", tok, f...)); !ok || ms != 30_000 {
			t.Fatalf("RENEW %d fields: left_ms %d %v, want the acquire's 30000", len(f), ms, ok)
		}
	}

	other := e.hello(t, "other")
	rid := other.send(TypeRelease, func(fb *frameBuilder) { fb.str(TagKey, "leased") }, func(fb *frameBuilder) { fb.u64(TagToken, tok) })
	other.expectRefused(rid, CodeStaleToken)
	rid = other.send(TypeRenew, func(fb *frameBuilder) { fb.str(TagKey, "leased") }, func(fb *frameBuilder) { fb.u64(TagToken, tok) })
	other.expectRefused(rid, CodeStaleToken)
	if h := e.node.Describe("leased").Holders; len(h) != 1 || h[0].Token != tok {
		t.Fatalf("another session's RELEASE changed the holders: %+v", h)
	}
}

// A tag given twice is a protocol error (list tags excepted).
func TestTagTwice(t *testing.T) {
	e := start(t, envOptions{})
	c := e.hello(t, "twice")
	key := func(fb *frameBuilder) { fb.str(TagKey, "k") }
	c.write(frameOf(TypeAcquire, 2, key, key))
	g := c.expect(TypeGoodbye)
	if code, _ := g.Uint(TagCode); Code(code) != CodeProtocolError {
		t.Fatalf("GOODBYE %v, want protocol_error", Code(code))
	}
}

// v1 on a key that sessions hold as a semaphore is answered '-': a v1
// lock counts as limit 1.
func TestV1OnASemaphore(t *testing.T) {
	e := start(t, envOptions{})
	c := e.hello(t, "sem")
	c.granted(c.acquire("pool", func(fb *frameBuilder) { fb.u32(TagLimit, 3) }))
	for _, a := range []oneshot.Action{oneshot.ActionLock, oneshot.ActionTryLock} {
		if got := v1Answer(t, e.v1(t, a, "pool", "v1")); got != '-' {
			t.Fatalf("v1 action %d on a semaphore: %q, want '-'", a, got)
		}
	}
}

// With DATA_PATH a session outlives a restart, with a fresh TTL from the
// start: it is not expired although longer than its TTL went by.
func TestSessionFreshTTLAfterRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	l, table, err := store.Open(store.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	e := startOn(t, envOptions{journal: l, table: table, clock: clk})
	a := e.hello(t, "durable", ttl(2000))
	a.granted(a.acquire("k"))
	e.stop()
	l.Close()
	clk.add(time.Hour)

	l, table, err = store.Open(store.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e = startOn(t, envOptions{journal: l, table: table, clock: clk})
	defer e.stop()
	clk.add(1999 * time.Millisecond)
	e.node.Advance()
	if _, ok := e.node.Holder("k"); !ok {
		t.Fatal("the session expired before a TTL from the restart")
	}
	clk.add(time.Millisecond)
	e.node.Advance()
	if _, ok := e.node.Holder("k"); ok {
		t.Fatal("the session outlived a TTL from the restart")
	}
}

// A CLOSE refused duplicate changes nothing: the connection stays open
// and serves the session, and a RESUME of it elsewhere later is served as
// any other (the refused CLOSE left no mark that closed it).
func TestCloseRefusedDuplicate(t *testing.T) {
	e := start(t, envOptions{})
	c := e.hello(t, "dup")
	tok := c.granted(c.acquire("k1"))
	c.write(frameOf(TypeClose, c.id))
	c.expectRefused(c.id, CodeDuplicate)
	c.release("k1", tok)
	c.granted(c.acquire("k2"))

	d := e.dial(t)
	d.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, c.sid) }, func(fb *frameBuilder) { fb.bytes(TagSecret, c.sec) })
	d.expect(TypeWelcome)
	d.id = c.id
	if id := d.send(TypePing); d.expect(TypeOK).ID != id {
		t.Fatal("a PING's OK with another id after the resume")
	}
	d.granted(d.acquire("k3"))
	if len(e.node.Snapshot().Sessions) != 1 {
		t.Fatal("the session is gone")
	}
}
