package session

import (
	"path/filepath"
	"testing"
)

// docs/protocol.md, Leases: a RELEASE with lapse 1 ends the lock as its
// lease running out would. It is answered OK and no LOST follows; the
// key keeps the acquire's lock-delay (a try is busy, in the write-ahead
// log too), and watchers see an expiry. lapse other than 0 or 1 is a bad
// request; lapse 0 is a plain release.
func TestReleaseLapse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	e, stop := startDurable(t, path)
	w := e.hello(t, "watcher")
	w.send(TypeWatch)
	w.expect(TypeOK)
	a := e.hello(t, "gives-up")
	keyTok := func(key string, tok uint64) []func(*frameBuilder) {
		return []func(*frameBuilder){func(fb *frameBuilder) { fb.str(TagKey, key) }, func(fb *frameBuilder) { fb.u64(TagToken, tok) }}
	}
	lapse := func(v uint8) func(*frameBuilder) { return func(fb *frameBuilder) { fb.u8(TagLapse, v) } }

	tok := a.granted(a.acquire("k", lease(60_000), delay(60_000)))
	w.expect(TypeEvent) // acquired
	a.expectRefused(a.send(TypeRelease, append(keyTok("k", tok), lapse(2))...), CodeBadRequest)
	id := a.send(TypeRelease, append(keyTok("k", tok), lapse(1))...)
	if f := a.expect(TypeOK); f.ID != id {
		t.Fatalf("OK of id %d, want %d", f.ID, id)
	}
	// The next frame a PING's answer: no LOST came between.
	if ping := a.send(TypePing); a.expect(TypeOK).ID != ping {
		t.Fatal("a frame came between the RELEASE's OK and the PING's")
	}
	ev := w.expect(TypeEvent)
	if kind, _ := ev.Uint(TagEvent); kind != 3 {
		t.Fatalf("watch event %d, want 3 (expired)", kind)
	}
	b := e.hello(t, "next")
	b.expectRefused(b.acquire("k", wait(0)), CodeBusy)
	if d := e.node.Describe("k"); len(d.Holders) != 0 {
		t.Fatalf("holders after the lapse %+v", d.Holders)
	}

	// lapse 0 is a plain release: no delay.
	tok = a.granted(a.acquire("plain", delay(60_000)))
	id = a.send(TypeRelease, append(keyTok("plain", tok), lapse(0))...)
	if f := a.expect(TypeOK); f.ID != id {
		t.Fatalf("OK of id %d, want %d", f.ID, id)
	}
	b.release("plain", b.granted(b.acquire("plain", wait(0))))

	stop()
	e, stop = startDurable(t, path)
	defer stop()
	c := e.hello(t, "after-restart")
	c.expectRefused(c.acquire("k", wait(0)), CodeBusy)
}
