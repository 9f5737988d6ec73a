package session

import (
	"path/filepath"
	"testing"
)

// On a write-ahead log as without one, CLOSE is answered OK before the
// server closes, and a HELLO and a CLOSE in one write get the WELCOME,
// then the OK.
func TestCloseOnWriteAheadLog(t *testing.T) {
	e, stop := startDurable(t, filepath.Join(t.TempDir(), "locks.wal"))
	defer stop()
	c := e.hello(t, "closing")
	c.granted(c.acquire("k"))
	id := c.send(TypeClose)
	if f := c.expect(TypeOK); f.ID != id {
		t.Fatalf("OK of id %d, want %d", f.ID, id)
	}

	d := e.dial(t)
	b := frameOf(TypeHello, 1, func(fb *frameBuilder) { fb.str(TagName, "at once") })
	b = append(b, frameOf(TypeClose, 2)...)
	d.write(b)
	d.expect(TypeWelcome)
	if f := d.expect(TypeOK); f.ID != 2 {
		t.Fatalf("OK of id %d, want 2", f.ID)
	}
}
