package session

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Two connections resume one session at once while a third, attached,
// keeps sending: the resumes swap the session's connection under the
// reader of the other (the race detector checks what they share). Each
// resume ends the connection it takes the session from, so writes may
// fail; they are not the point.
func TestConcurrentResumes(t *testing.T) {
	e := start(t, envOptions{})
	c := e.hello(t, "racer")
	resume := frameOf(TypeResume, 1, func(fb *frameBuilder) { fb.u64(TagSession, c.sid) },
		func(fb *frameBuilder) { fb.bytes(TagSecret, c.sec) })
	var wg sync.WaitGroup
	for range 4 {
		r := e.dial(t)
		wg.Go(func() {
			r.c.Write(resume)
			var f Frame
			if r.r.next(&f) != nil || f.Type != TypeWelcome {
				return // the session moved on before this resume: fine
			}
			for i := range 20 {
				r.c.Write(frameOf(TypePing, uint64(2+i)))
			}
		})
	}
	for i := range 50 {
		c.c.Write(frameOf(TypePing, uint64(2+i)))
	}
	wg.Wait()
	e.stop()
}

// An ACQUIRE sent on the attached connection, and at once a RESUME of the
// session on a new one: whatever the old connection had read is handled
// or dropped before the WELCOME is made, so the WELCOME tells the truth.
// Either it counts the acquire applied and lists its lock, or it counts
// it not applied, and the acquire sent again with the same id on the new
// connection is granted, not refused as a duplicate. 1,000 rounds, the
// new connection of each the old one of the next.
func TestResumeRacesAnAcquire(t *testing.T) {
	e := start(t, envOptions{})
	old := e.hello(t, "racer")
	resume := func(c *client) []byte {
		return frameOf(TypeResume, 1, func(fb *frameBuilder) { fb.u64(TagSession, c.sid) },
			func(fb *frameBuilder) { fb.bytes(TagSecret, c.sec) })
	}
	rounds := 1000
	if testing.Short() {
		rounds = 100
	}
	var applied, resent int
	for i := range rounds {
		key := fmt.Sprintf("k%d", i)
		id := old.acquire(key)
		nc := e.dial(t)
		nc.write(resume(old))
		w := nc.expect(TypeWelcome)
		nc.sid, nc.sec = old.sid, old.sec
		got, _ := w.Uint(TagApplied)
		var token uint64
		for _, h := range w.All(TagHeld) {
			var item Frame
			item.Fields, _ = parseFields(h, nil)
			if k, _ := item.Get(TagKey); string(k) == key {
				token, _ = item.Uint(TagToken)
			}
		}
		switch {
		case got >= id && token == 0:
			t.Fatalf("round %d: WELCOME says request %d applied, and does not list the lock of %s", i, id, key)
		case got >= id:
			applied++
			nc.id = id
			// The GRANTED of the acquire, when it had not left by the old
			// connection, follows the WELCOME; drain it with the release's
			// answer.
		case token != 0:
			t.Fatalf("round %d: WELCOME lists %s held (token %d) but says only %d applied, of %d", i, key, token, got, id)
		default:
			resent++
			nc.id = id - 1
			if again := nc.acquire(key); again != id {
				t.Fatalf("round %d: resent as %d", i, again)
			}
			token = nc.granted(id)
		}
		rid := nc.send(TypeRelease, func(fb *frameBuilder) { fb.str(TagKey, key) }, func(fb *frameBuilder) { fb.u64(TagToken, token) })
		for {
			f := nc.read()
			if f.Type == TypeOK && f.ID == rid {
				break
			}
			if f.Type != TypeGranted || f.ID != id {
				code, _ := f.Uint(TagCode)
				t.Fatalf("round %d: frame %#02x id %d code %v before the release's OK", i, uint8(f.Type), f.ID, Code(code))
			}
		}
		// The old connection is told why it ends: a GOODBYE session_ended
		// before its end, unless the end is a reset (it had requests
		// unread, which a close answers with a reset).
		old.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			var f Frame
			err := old.r.next(&f)
			if err == nil && f.Type == TypeGoodbye {
				if code, _ := f.Uint(TagCode); Code(code) != CodeSessionEnded {
					t.Fatalf("round %d: the old connection's GOODBYE has code %v", i, Code(code))
				}
				break
			}
			if errors.Is(err, syscall.ECONNRESET) {
				break
			}
			if err != nil {
				t.Fatalf("round %d: the old connection ended without a GOODBYE: %v (applied %d of %d)", i, err, got, id)
			}
		}
		old.c.Close()
		old = nc
	}
	t.Logf("%d rounds: acquire applied before the WELCOME in %d, sent again in %d", rounds, applied, resent)
}
