package httpapi_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/httpapi"
	"github.com/locking-center/locking-center/mutex"
)

// Each event names its key, token, session, client, owner and time, and
// has an id one above the event before it.
func TestEventFields(t *testing.T) {
	clk := newClock()
	e := start(t, options{clock: clk})
	s := e.subscribe("")
	a := e.acquire(`{"key":"orders/1","owner":"worker-1","client_id":"c1","duration_ms":1000}`)
	ev := s.expectEvent("acquired", "orders/1")
	d := ev.data
	if u64(d["fencing_token"]) != a.token() || u64(d["session"]) != u64(a.lock()["session"]) || d["client_id"] != "c1" ||
		d["owner"] != "worker-1" || d["mode"] != "exclusive" || d["time"] != clk.Now().Format(time.RFC3339Nano) ||
		d["id"].(interface{ String() string }).String() != ev.id {
		t.Fatalf("acquired event %s: %v", ev.id, d)
	}
	e.advance(time.Second)
	lost := s.expectEvent("expired", "orders/1")
	if lost.data["reason"] != "lease_expired" || mustUint(t, lost.id) != mustUint(t, ev.id)+1 {
		t.Fatalf("expired event %s after %s: %v", lost.id, ev.id, lost.data)
	}
	// A reset by another front end is seen too.
	e.acquire(`{"key":"orders/2","owner":"worker-1"}`)
	s.expectEvent("acquired", "orders/2")
	e.node.ResetKey("orders/2")
	s.expectEvent("reset", "orders/2")
	// And v1 locks.
	if _, _, err := e.node.TryLock(mutex.Claim{Key: "v1-key", Source: "10.0.0.4"}); err != nil {
		t.Fatal(err)
	}
	if ev := s.expectEvent("acquired", "v1-key"); ev.data["owner"] != "10.0.0.4" || ev.data["session"] != nil {
		t.Fatalf("v1 event %v", ev.data)
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSubscribePrefix(t *testing.T) {
	e := start(t, options{})
	orders := e.subscribe("?prefix=orders/")
	all := e.subscribe("")
	e.acquire(`{"key":"jobs/1","owner":"w"}`)
	e.acquire(`{"key":"orders/1","owner":"w"}`)
	all.expectEvent("acquired", "jobs/1")
	all.expectEvent("acquired", "orders/1")
	orders.expectEvent("acquired", "orders/1")
	expect(t, e.post("/api/v1/locks/release", `{"key":"jobs/1","owner":"w"}`), 200, "")
	expect(t, e.post("/api/v1/locks/release", `{"key":"orders/1","owner":"w"}`), 200, "")
	all.expectEvent("released", "jobs/1")
	orders.expectEvent("released", "orders/1") // jobs/1 never reached it
}

func TestKeepAlive(t *testing.T) {
	e := start(t, options{cfg: httpapi.Config{KeepAlive: 20 * time.Millisecond}})
	s := e.subscribe("")
	for range 2 {
		if c := s.next(); c.comment != "keep-alive" {
			t.Fatalf("got %+v, want a keep-alive comment", c)
		}
	}
}

// Last-Event-ID resumes after that event out of the ring; a resume older
// than the ring gets all it has and a comment that events were missed.
func TestResume(t *testing.T) {
	e := start(t, options{cfg: httpapi.Config{RingSize: 4}})
	s := e.subscribe("")
	var ids []string
	for i := range 3 {
		e.acquire(fmt.Sprintf(`{"key":"k%d","owner":"w"}`, i))
		ids = append(ids, s.expectEvent("acquired", fmt.Sprintf("k%d", i)).id)
	}
	r := e.subscribe("", "Last-Event-ID", ids[0])
	r.expectEvent("acquired", "k1")
	r.expectEvent("acquired", "k2")
	e.acquire(`{"key":"k3","owner":"w"}`)
	if ev := r.expectEvent("acquired", "k3"); mustUint(t, ev.id) != mustUint(t, ids[2])+1 {
		t.Fatalf("live event %s after %s", ev.id, ids[2])
	}
	// The query parameter does the same, and the prefix filters the replay.
	q := e.subscribe("?prefix=k2&last_event_id=" + ids[0])
	e.acquire(`{"key":"k2x","owner":"w"}`)
	q.expectEvent("acquired", "k2")
	q.expectEvent("acquired", "k2x")

	// The ring holds 4 events: k1, k2, k3, k2x. k0's is gone.
	old := e.subscribe("", "Last-Event-ID", strconv.FormatUint(mustUint(t, ids[0])-1, 10))
	if c := old.next(); c.comment != "missed events" {
		t.Fatalf("got %+v, want the missed comment", c)
	}
	for _, k := range []string{"k1", "k2", "k3", "k2x"} {
		old.expectEvent("acquired", k)
	}
	// 0 asks for the whole ring: no comment while it has not wrapped.
	fresh := start(t, options{})
	fresh.acquire(`{"key":"a","owner":"w"}`)
	z := fresh.subscribe("", "Last-Event-ID", "0")
	if ev := z.next(); ev.data["key"] != "a" {
		t.Fatalf("got %+v, want the event of a", ev)
	}
	req, _ := http.NewRequest(http.MethodGet, e.url+"/api/v1/locks/subscribe", nil)
	req.Header.Set("Last-Event-ID", "soon")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("a bad Last-Event-ID: %s", resp.Status)
	}
}

// Events made while nobody subscribes are kept for a resume: a subscriber
// that comes back with the last id it had gets them, fields and all, then
// the events that follow; one without Last-Event-ID gets only the latter.
func TestResumeAfterNobodyListened(t *testing.T) {
	clk := newClock()
	e := start(t, options{clock: clk})
	s := e.subscribe("")
	e.acquire(`{"key":"k0","owner":"w"}`)
	last := s.expectEvent("acquired", "k0").id
	s.close()
	eventually(t, "the subscriber to leave", func() bool { return e.metric("locking_center_http_subscribers") == 0 })

	a := e.acquire(`{"key":"orders/<1>","owner":"worker & \u2028 1","client_id":"c1","duration_ms":1000}`)
	e.advance(time.Second) // its lease runs out
	if _, _, err := e.node.TryLock(mutex.Claim{Key: "v1-key", Source: "10.0.0.4"}); err != nil {
		t.Fatal(err)
	}
	r := e.subscribe("", "Last-Event-ID", last)
	got := r.expectEvent("acquired", "orders/<1>")
	d := got.data
	if mustUint(t, got.id) != mustUint(t, last)+1 || u64(d["fencing_token"]) != a.token() || u64(d["session"]) != u64(a.lock()["session"]) ||
		d["client_id"] != "c1" || d["owner"] != "worker & \u2028 1" || d["mode"] != "exclusive" || d["time"] != clk.Now().Add(-time.Second).Format(time.RFC3339Nano) {
		t.Fatalf("replayed event %s after %s: %v", got.id, last, d)
	}
	if ev := r.expectEvent("expired", "orders/<1>"); ev.data["reason"] != "lease_expired" || ev.data["client_id"] != "c1" {
		t.Fatalf("replayed expiry %v", ev.data)
	}
	if ev := r.expectEvent("acquired", "v1-key"); ev.data["owner"] != "10.0.0.4" || ev.data["session"] != nil {
		t.Fatalf("replayed v1 event %v", ev.data)
	}

	fresh := e.subscribe("")
	e.acquire(`{"key":"after","owner":"w"}`)
	fresh.expectEvent("acquired", "after")
	r.expectEvent("acquired", "after")
}

// A subscriber that stops reading is dropped with a count, while locks
// go on and a subscriber that reads gets every event.
func TestSlowSubscriberDropped(t *testing.T) {
	e := start(t, options{cfg: httpapi.Config{SubscriberLag: 16, WriteTimeout: time.Minute}})
	// A client that sends its request and never reads.
	stuck, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if _, err := fmt.Fprintf(stuck, "GET /api/v1/locks/subscribe HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stuck subscriber", func() bool { return e.metric("locking_center_http_subscribers") == 1 })
	good := e.subscribe("")
	key := strings.Repeat("k", 120)
	const maxRounds = 20000
	cycles := 0
	for ; cycles < maxRounds && e.metric("locking_center_http_subscribers_dropped_total") == 0; cycles++ {
		for range 8 {
			if _, _, err := e.node.TryLock(mutex.Claim{Key: key, Source: "w"}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.node.Release(key); err != nil {
				t.Fatal(err)
			}
		}
		// The subscriber that reads keeps up: it has read all 16 before
		// the next round.
		for range 16 {
			good.event()
		}
	}
	if e.metric("locking_center_http_subscribers_dropped_total") != 1 {
		t.Fatalf("not dropped after %d cycles", cycles*8)
	}
	t.Logf("dropped after %d lock cycles", cycles*8)
	if n := e.metric("locking_center_http_subscribers"); n != 1 {
		t.Fatalf("%v subscribers after the drop, want the one that reads", n)
	}
	// Its connection ends: once the client reads what the kernel holds,
	// the stream closes with a comment that says why.
	stuck.SetReadDeadline(time.Now().Add(2 * time.Minute))
	rest, err := io.ReadAll(stuck)
	if err != nil {
		t.Fatalf("the dropped stream did not end: %v", err)
	}
	if !strings.Contains(string(rest), commentDropped) {
		t.Fatalf("the dropped stream ended without saying why (%d bytes)", len(rest))
	}
	// Locks go on, and the reader gets every event.
	e.acquire(`{"key":"after","owner":"w"}`)
	good.expectEvent("acquired", "after")
}

func TestSubscribersGauge(t *testing.T) {
	e := start(t, options{})
	s := e.subscribe("")
	if e.metric("locking_center_http_subscribers") != 1 {
		t.Fatal("gauge")
	}
	s.close()
	eventually(t, "the gauge to drop", func() bool { return e.metric("locking_center_http_subscribers") == 0 })
}

// commentDropped is the stream's last comment when its subscriber is
// dropped.
const commentDropped = ": dropped: this stream fell too far behind\n\n"
