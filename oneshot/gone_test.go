package oneshot

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/nodetest"
	"github.com/locking-center/locking-center/mutex"
)

// A parked lock whose client has left, the end of its connection already
// on the server's socket but its request not yet cancelled by the
// connection's goroutine, is withdrawn before an unlock passes the key
// on: it is never granted, no fencing token is spent on it, the next
// waiter holds the key at once with the holder's token plus one, and the
// departed connection is closed unanswered. The connection's goroutine
// is held (parkHook) before its first read, or after the read that met
// the end, so that only the server's look at the socket, or the mark that
// read left, can tell; under TLS a close_notify is seen once it was read.
func TestDepartedWaiterIsNeverGranted(t *testing.T) {
	cases := []struct {
		name      string
		leave     func(c *clientConn)
		afterRead bool // hold the goroutine after its read met the end
		reads     bool // the client can still read
	}{
		{"closed", func(c *clientConn) { c.tcp.Close() }, false, false}, // under TLS: with no close_notify
		{"reset", func(c *clientConn) { c.SetLinger(0); c.tcp.Close() }, false, false},
		{"half-closed", func(c *clientConn) { c.CloseWrite() }, false, true},
		{"closed, read", func(c *clientConn) { c.Close() }, true, false}, // under TLS: with its close_notify
		// Under TLS a close_notify alone, the socket left open: only the
		// read tells.
		{"half-closed, read", func(c *clientConn) { c.Conn.(interface{ CloseWrite() error }).CloseWrite() }, true, true},
	}
	bothTransports(t, func(t *testing.T, start starter) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { testDepartedWaiter(t, start, tc.leave, tc.afterRead, tc.reads) })
		}
	})
}

func testDepartedWaiter(t *testing.T, start starter, leave func(*clientConn), afterRead, reads bool) {
	held := make(chan *waiter, 1)
	resume := make(chan struct{})
	release := sync.OnceFunc(func() { close(resume) })
	defer release() // before the server's Close, which waits for the goroutine
	var taken atomic.Bool
	s := start(t, ServerConfig{parkHook: func(w *waiter, left bool) {
		if left == afterRead && taken.CompareAndSwap(false, true) {
			held <- w
			<-resume
		}
	}})
	if a := s.do(t, lockReq("k", "holder")); a != AnswerOK {
		t.Fatalf("holder's lock answered %q", a)
	}
	holder, _ := s.table.Holder("k")
	departs := s.park(t, "k", "departs")
	next := s.park(t, "k", "next")
	events := nodetest.Record(t, s.table)

	leave(departs)
	var w *waiter
	select {
	case w = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the departing waiter's goroutine never reached the hook")
	}
	eventually(t, "the server to see the client gone", w.gone)
	if a := s.do(t, Request{Action: ActionUnlock, Key: "k"}); a != AnswerOK {
		t.Fatalf("unlock answered %q", a)
	}
	h, ok := s.table.Holder("k")
	if !ok || h.Source != "next" || h.Token != holder.Token+1 {
		t.Fatalf("after the unlock the key is held by %+v (%v), want next with token %d", h, ok, holder.Token+1)
	}
	if a := readAnswer(t, next); a != AnswerOK {
		t.Fatalf("next waiter answered %q", a)
	}
	release()
	// A client that only half-closed reads no answer, as before: the
	// server closes the connection.
	if reads && !readClosed(t, departs) {
		t.Fatal("the departed waiter was answered")
	}

	withdrawn, released := -1, -1
	all := events()
	for i, ev := range all {
		switch {
		case ev.Ticket == w.ticket && ev.Kind == mutex.EventGranted:
			t.Fatalf("the departed waiter was granted: %+v", all)
		case ev.Kind == mutex.EventLost && ev.Reason == mutex.ReasonRevoked:
			t.Fatalf("a grant was revoked: %+v", all)
		case ev.Ticket == w.ticket && ev.Kind == mutex.EventWithdrawn && ev.Reason == mutex.ReasonCancelled:
			withdrawn = i
		case ev.Kind == mutex.EventReleased && ev.Token == holder.Token:
			released = i
		}
	}
	if withdrawn < 0 || released < withdrawn {
		t.Fatalf("the departed waiter was not withdrawn before the release: %+v", all)
	}
}
