package session

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// owedEnv serves a node whose log is j, with the event loop as loop
// says, through one poller the test watches.
func owedEnv(t *testing.T, j *heldJournal, loop bool) (*env, <-chan string) {
	t.Helper()
	o := envOptions{cfg: Config{ParkAfter: time.Millisecond, EventLoop: loop, Pollers: 1}}
	if j != nil {
		o.journal = j
	}
	e := start(t, o)
	if j != nil {
		t.Cleanup(j.release) // before the server's close, which waits for what the log holds
	}
	return e, watchPoller(t, e)
}

// expectGoodbye reads a GOODBYE with code, then the connection's end.
func expectGoodbye(t *testing.T, c *client, code Code) {
	t.Helper()
	f := c.expect(TypeGoodbye)
	if got, _ := f.Uint(TagCode); Code(got) != code {
		t.Fatalf("GOODBYE %v, want %v", Code(got), code)
	}
	if !c.closed() {
		t.Fatal("the connection is still open after its GOODBYE")
	}
}

// A frame refused inside an open session (here a second HELLO) ends the
// connection with GOODBYE protocol_error after the answers of the frames
// read before it, which were handled in the same batch.
func TestGoodbyeAfterTheAnswersOfItsBatch(t *testing.T) {
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprint("event loop ", loop), func(t *testing.T) {
			e, _ := owedEnv(t, nil, loop)
			c := e.hello(t, "c")
			b := frameOf(TypeAcquire, 2, func(fb *frameBuilder) { fb.str(TagKey, "k") })
			b = append(b, frameOf(TypePing, 3)...)
			b = append(b, frameOf(TypeHello, 4, func(fb *frameBuilder) { fb.str(TagName, "again") })...)
			c.write(b)
			if f := c.expect(TypeGranted); f.ID != 2 {
				t.Fatalf("GRANTED of id %d, want 2", f.ID)
			}
			if f := c.expect(TypeOK); f.ID != 3 {
				t.Fatalf("OK of id %d, want 3", f.ID)
			}
			expectGoodbye(t, c, CodeProtocolError)
		})
	}
}

// On a log, the answers that wait for it still go ahead of the GOODBYE
// of a bad frame: the connection ends once they are written.
func TestGoodbyeWaitsForTheLog(t *testing.T) {
	c, seen, j := heldBurst(t)
	c.write(frameOf(0x55, 4))         // no such type
	await(t, seen, "ended", "served") // the bad frame read, the connection's end waits for the log
	j.release()
	expectBurstAnswers(t, c)
	expectGoodbye(t, c, CodeProtocolError)
}

// heldBurst opens a session on a node whose log holds every command from
// then on, and sends it an ACQUIRE (id 2) and a PING (id 3), the grant
// held by the log.
func heldBurst(t *testing.T) (*client, <-chan string, *heldJournal) {
	t.Helper()
	j := &heldJournal{}
	e, seen := owedEnv(t, j, true)
	c := e.hello(t, "c")
	await(t, seen, "parked")
	j.hold()
	b := frameOf(TypeAcquire, 2, func(fb *frameBuilder) { fb.str(TagKey, "k") })
	c.write(append(b, frameOf(TypePing, 3)...))
	return c, seen, j
}

// expectBurstAnswers reads the answers of heldBurst's frames.
func expectBurstAnswers(t *testing.T, c *client) {
	t.Helper()
	c.granted(2)
	if f := c.expect(TypeOK); f.ID != 3 {
		t.Fatalf("OK of id %d, want 3", f.ID)
	}
}

// A client that shuts down its writes after its requests reads their
// answers, those that wait for the log too, before the server closes.
func TestHalfCloseGetsItsAnswers(t *testing.T) {
	c, seen, j := heldBurst(t)
	if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	await(t, seen, "ended", "served", "parked")
	j.release()
	expectBurstAnswers(t, c)
	if !c.closed() {
		t.Fatal("the connection is still open")
	}
}

// A RESUME takes the session from its connection only once that
// connection has the answers of the requests it handled, those that wait
// for the log too; they come there, ahead of GOODBYE session_ended, and
// never on the new connection.
func TestResumeLeavesTheOldAnswersOnTheOldConnection(t *testing.T) {
	j := &heldJournal{}
	e, seen := owedEnv(t, j, true)
	a := e.hello(t, "a")
	await(t, seen, "parked")
	e.session.mu.Lock()
	var old *conn
	for c := range e.session.conns {
		old = c
	}
	e.session.mu.Unlock()
	j.hold()
	id := a.acquire("k")
	await(t, seen, "served")

	b := e.dial(t)
	b.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, a.sid) }, func(fb *frameBuilder) { fb.bytes(TagSecret, a.sec) })
	// The resume holds the old connection's handling while it waits.
	eventually(t, "the resume under way", func() bool {
		if old.handling.TryLock() {
			old.handling.Unlock()
			return false
		}
		return true
	})
	j.release()
	a.granted(id)
	expectGoodbye(t, a, CodeSessionEnded)

	w := b.expect(TypeWelcome)
	applied, _ := w.Uint(TagApplied)
	if applied != id {
		t.Fatalf("applied %d, want %d", applied, id)
	}
	b.id = applied
	ping := b.send(TypePing)
	if f := b.read(); f.Type != TypeOK || f.ID != ping {
		t.Fatalf("frame %#02x id %d after the WELCOME, want the OK of %d", uint8(f.Type), f.ID, ping)
	}
}
