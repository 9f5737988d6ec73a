package oneshot

import (
	"strconv"
	"testing"
	"time"
)

// A client that reads its '+' and keeps the connection open keeps its
// grant; the server ends the connection once the header timeout has
// passed, as the '+' was acknowledged.
func TestDeliveryHeldOpenPastTimeoutKeepsGrant(t *testing.T) {
	bothTransports(t, testDeliveryHeldOpenPastTimeoutKeepsGrant)
}

func testDeliveryHeldOpenPastTimeoutKeepsGrant(t *testing.T, start starter) {
	s := start(t, ServerConfig{HeaderTimeout: 50 * time.Millisecond})
	c := s.send(t, AppendRequest(nil, lockReq("k", "slow")))
	if a := readAnswer(t, c); a != AnswerOK {
		t.Fatalf("answered %q", a)
	}
	if !readClosed(t, c) {
		t.Fatal("server kept the connection past the header timeout")
	}
	if src := s.holderSource("k"); src != "slow" {
		t.Fatalf("holder %q after the timeout, want slow", src)
	}
	eventually(t, "no pending delivery", func() bool { return s.srv.deliveries.len() == 0 })
}

// An unlock ends the holder's pending delivery at once: its connection is
// closed without waiting for the client or the header timeout.
func TestUnlockEndsPendingDelivery(t *testing.T) { bothTransports(t, testUnlockEndsPendingDelivery) }

func testUnlockEndsPendingDelivery(t *testing.T, start starter) {
	s := start(t, ServerConfig{HeaderTimeout: time.Hour})
	c := s.send(t, AppendRequest(nil, lockReq("k", "holder")))
	if a := readAnswer(t, c); a != AnswerOK {
		t.Fatalf("answered %q", a)
	}
	eventually(t, "the delivery pending", func() bool { return s.srv.deliveries.len() == 1 })
	if a := s.do(t, Request{Action: ActionUnlock, Key: "k"}); a != AnswerOK {
		t.Fatalf("unlock answered %q", a)
	}
	if !readClosed(t, c) {
		t.Fatal("the ended grant's connection stayed open")
	}
	if n := s.srv.deliveries.len(); n != 0 {
		t.Fatalf("%d deliveries pending after the unlock", n)
	}
}

// Every delivery is settled once its clients have closed, whether or not
// the keys were unlocked.
func TestDeliveriesDrain(t *testing.T) { bothTransports(t, testDeliveriesDrain) }

func testDeliveriesDrain(t *testing.T, start starter) {
	s := start(t, ServerConfig{})
	for i := range 200 {
		key := "d" + strconv.Itoa(i)
		if a := s.do(t, lockReq(key, "")); a != AnswerOK {
			t.Fatalf("lock %s: %q", key, a)
		}
		if i%2 == 0 {
			s.do(t, Request{Action: ActionUnlock, Key: key})
		}
	}
	eventually(t, "deliveries settled", func() bool { return s.srv.deliveries.len() == 0 })
	if n := s.table.Len(); n != 100 {
		t.Fatalf("%d keys held, want 100", n)
	}
}

// len returns the number of pending deliveries.
func (d *deliveries) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}
