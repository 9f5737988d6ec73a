package session

import (
	"testing"
)

// A HELLO or RESUME with a field the server does not know is refused
// unsupported, answering its id; the connection stays open for another
// HELLO or RESUME, as a client of a later version needs to fall back.
func TestOpenUnknownFieldRefused(t *testing.T) {
	e := start(t, envOptions{})
	unknown := func(fb *frameBuilder) { fb.bytes(0x7F, []byte{1}) }

	c := e.dial(t)
	id := c.send(TypeHello, func(fb *frameBuilder) { fb.str(TagName, "new") }, unknown)
	c.expectRefused(id, CodeUnsupported)
	id = c.send(TypeHello, func(fb *frameBuilder) { fb.str(TagName, "new") })
	w := c.expect(TypeWelcome)
	if w.ID != id {
		t.Fatalf("WELCOME answers id %d, want %d", w.ID, id)
	}
	c.sid, _ = w.Uint(TagSession)
	c.sec, _ = w.Get(TagSecret)

	r := e.dial(t)
	sess := func(fb *frameBuilder) { fb.u64(TagSession, c.sid) }
	id = r.send(TypeResume, sess, func(fb *frameBuilder) { fb.bytes(TagSecret, c.sec) }, unknown)
	r.expectRefused(id, CodeUnsupported)
	id = r.send(TypeResume, sess, func(fb *frameBuilder) { fb.bytes(TagSecret, c.sec) })
	if w := r.expect(TypeWelcome); w.ID != id {
		t.Fatalf("WELCOME of the resume answers id %d, want %d", w.ID, id)
	}
	r.granted(r.acquire("k"))
}

// A GOODBYE that refuses a HELLO or RESUME names its id; one that answers
// no request (a frame that cannot be parsed) has id 0.
func TestGoodbyeAnswersItsRequest(t *testing.T) {
	e := start(t, envOptions{})
	r := e.dial(t)
	r.id = 40
	id := r.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, 99) },
		func(fb *frameBuilder) { fb.bytes(TagSecret, make([]byte, SecretLen)) })
	g := r.expect(TypeGoodbye)
	if code, _ := g.Uint(TagCode); Code(code) != CodeUnknownSession || g.ID != id {
		t.Fatalf("GOODBYE %v id %d, want unknown_session id %d", Code(code), g.ID, id)
	}
	r = e.dial(t)
	r.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, 99) })
	if g := r.expect(TypeGoodbye); g.ID != 1 {
		t.Fatalf("GOODBYE bad_request of a RESUME without a secret: id %d, want 1", g.ID)
	}
	c := e.hello(t, "a")
	c.write(frameOf(TypeCancel, 5, func(fb *frameBuilder) { fb.bytes(TagTarget, []byte{1}) }))
	if g := c.expect(TypeGoodbye); g.ID != 0 {
		t.Fatalf("GOODBYE protocol_error: id %d, want 0", g.ID)
	}
}
