package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

func hubEvent(key string) mutex.Event {
	return mutex.Event{Kind: mutex.EventGranted, Key: key, Token: 1, Source: "w", At: time.Unix(1, 0)}
}

// record hands ev to h's observer as the node does: under the lock that
// h's readers take.
func record(h *hub, ev mutex.Event, client string) {
	h.lock(func() { h.observe(ev, client) })
}

// runHub starts h's fan-out goroutine until the test ends.
func runHub(t *testing.T, h *hub) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.run()
	}()
	t.Cleanup(func() {
		h.close()
		<-done
	})
}

// When the fan-out goroutine falls a whole ring behind the observer,
// every subscriber is dropped rather than left to miss events unknowingly.
func TestHubDropsAllWhenTheRingIsLost(t *testing.T) {
	dropped := 0
	h := newHub(4, 4, 0, 100, func() { dropped++ })
	sub, _, _ := h.join("", 0, false)
	for range 9 { // more than the ring holds, before the fan-out runs
		record(h, hubEvent("k"), "")
	}
	runHub(t, h)
	<-sub.signal
	if !sub.dropped.Load() {
		t.Fatal("not dropped")
	}
	if _, ok := h.collect(sub); ok {
		t.Fatal("a dropped subscriber collected")
	}
	h.smu.RLock()
	defer h.smu.RUnlock()
	if dropped != 1 || len(h.subs) != 0 || h.sent != 109 {
		t.Fatalf("dropped %d, %d subscribers, sent %d", dropped, len(h.subs), h.sent)
	}
}

// A subscriber whose prefix matches nothing new is not woken; its cursor
// moves on by itself, so it does not count as behind.
func TestHubSkipsFilteredSubscribers(t *testing.T) {
	h := newHub(8, 2, 0, 0, nil)
	quiet, _, _ := h.join("x/", 0, false)
	all, _, _ := h.join("", 0, false)
	runHub(t, h)
	for i := range 5 {
		record(h, hubEvent("y"), "")
		<-all.signal
		b, ok := h.collect(all)
		if !ok || len(b) == 0 {
			t.Fatalf("round %d: collected %q, %v", i, b, ok)
		}
	}
	select {
	case <-quiet.signal:
		t.Fatal("woken for events it does not want")
	default:
	}
	if quiet.dropped.Load() || quiet.cursor.Load() != 5 {
		t.Fatalf("filtered subscriber: dropped %v, cursor %d", quiet.dropped.Load(), quiet.cursor.Load())
	}
}

// The fan-out hands out at most a batch per pace, and the pace grows with
// the subscribers: a thousand streams and an event a millisecond make a
// few batches, not one per event; every event still arrives, in order.
func TestHubPacesBatchesBySubscribers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(1<<12, 1<<12, 10*time.Millisecond, 0, nil)
		subs := make([]*subscriber, 1000)
		for i := range subs {
			subs[i], _, _ = h.join("", 0, false)
		}
		if p := h.pace(); p != 1000*streamWriteCost {
			t.Fatalf("pace with 1000 subscribers %v, want %v", p, 1000*streamWriteCost)
		}
		runHub(t, h)
		wakes, got := 0, 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			for got < 100 {
				<-subs[0].signal
				wakes++
				b, ok := h.collect(subs[0])
				if !ok {
					t.Error("dropped")
					return
				}
				got += bytes.Count(b, []byte("\ndata: "))
			}
		}()
		for range 100 {
			record(h, hubEvent("k"), "")
			time.Sleep(time.Millisecond)
		}
		<-done
		// 100 ms of events at one batch per 50 ms: the first at once,
		// then one per pace.
		if wakes > 4 {
			t.Fatalf("%d batches for 100 events over 100 ms", wakes)
		}
		// Subscribers of one prefix share the bytes of a batch.
		b1, _ := h.collect(subs[1])
		b2, _ := h.collect(subs[2])
		if len(b1) == 0 || &b1[0] != &b2[0] {
			t.Fatal("two subscribers of one prefix got copies of their own")
		}
	})
}

// A backlog of a quarter of the lag a subscriber may have goes out at once,
// whatever the pace.
func TestHubHandsOutABacklogAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(64, 16, time.Hour, 0, nil)
		sub, _, _ := h.join("", 0, false)
		runHub(t, h)
		record(h, hubEvent("k"), "")
		<-sub.signal // the first batch goes out at once
		h.collect(sub)
		start := time.Now()
		for range 4 {
			record(h, hubEvent("k"), "")
		}
		<-sub.signal
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("a backlog of 4 waited %v", waited)
		}
		if b, ok := h.collect(sub); !ok || bytes.Count(b, []byte("\ndata: ")) != 4 {
			t.Fatalf("collected %q, %v", b, ok)
		}
	})
}

// replicatedHub returns a hub of a replicated node whose Replace count is
// *replaced.
func replicatedHub(replaced *uint64) *hub {
	h := newHub(64, 64, 0, 1_000_000, nil)
	h.replaced, h.floor = func() uint64 { return *replaced }, 0
	return h
}

// eventAt is an event of key made by the entry at position.
func eventAt(key string, position uint64) mutex.Event {
	ev := hubEvent(key)
	ev.Position = position
	return ev
}

// ids returns the ids of the SSE events in b.
func ids(b []byte) []string {
	var out []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		if id, ok := bytes.CutPrefix(line, []byte("id: ")); ok {
			out = append(out, string(id))
		}
	}
	return out
}

// Two replicated nodes that apply the same entries give their events the
// same ids, from the entries' positions; a subscriber resumes at the
// other node after the last id it had, with nothing missed and nothing
// twice, those events the other node has not handed out yet included.
func TestHubReplicatedIDs(t *testing.T) {
	var replaced uint64
	a, b := replicatedHub(&replaced), replicatedHub(&replaced)
	entries := []struct {
		position uint64
		keys     []string
	}{{5, []string{"x"}}, {7, []string{"x", "y", "z"}}, {9, []string{"x"}}}
	for _, e := range entries[:2] {
		for _, k := range e.keys {
			record(a, eventAt(k, e.position), "")
			record(b, eventAt(k, e.position), "")
		}
	}
	a.deliver(nil, nil)
	b.deliver(nil, nil)
	_, all, missed := a.join("", 0, true)
	want := []string{"327680", "458752", "458753", "458754"} // 5<<16, 7<<16 + 0, 1, 2
	if got := ids(all); missed || !slices.Equal(got, want) {
		t.Fatalf("node a's ids %v (missed %v), want %v", got, missed, want)
	}
	if _, bs, _ := b.join("", 0, true); !bytes.Equal(bs, all) {
		t.Fatalf("node b's events differ:\n%s\n%s", bs, all)
	}

	// The subscriber had up to 7<<16 + 1 at a; b has handed out the rest
	// of entry 7, and has observed entry 9 but not handed it out.
	record(b, eventAt("x", 9), "")
	sub, backlog, missed := b.join("", 458753, true)
	if got := ids(backlog); missed || !slices.Equal(got, []string{"458754"}) {
		t.Fatalf("resumed backlog %v (missed %v)", got, missed)
	}
	b.deliver(nil, nil)
	got, ok := b.collect(sub)
	if !ok || !slices.Equal(ids(got), []string{"589824"}) {
		t.Fatalf("after the resume: %q, %v", got, ok)
	}

	// Resuming after an id the node has observed but not handed out
	// passes over the events up to it.
	record(b, eventAt("x", 10), "")
	record(b, eventAt("x", 11), "")
	sub, backlog, missed = b.join("", 10<<16, true)
	if missed || len(backlog) != 0 {
		t.Fatalf("resume ahead of the fan-out: backlog %q, missed %v", backlog, missed)
	}
	b.deliver(nil, nil)
	if got, ok := b.collect(sub); !ok || !slices.Equal(ids(got), []string{"720896"}) {
		t.Fatalf("after a resume ahead of the fan-out: %q, %v", got, ok)
	}

	// An id from before the node's first event, and one from before a
	// snapshot it was sent, cannot be resumed without a gap.
	if _, _, missed := b.join("", 4<<16, true); !missed {
		t.Fatal("an id before the node's first event: not missed")
	}
	replaced++
	record(b, eventAt("x", 20), "")
	b.deliver(nil, nil)
	if _, _, missed := b.join("", 11<<16, true); !missed {
		t.Fatal("an id before a snapshot the node was sent: not missed")
	}
	if _, bs, missed := b.join("", 20<<16-1, true); missed || !slices.Equal(ids(bs), []string{"1310720"}) {
		t.Fatalf("an id after the snapshot: %v, missed %v", ids(bs), missed)
	}
}

// With nobody subscribed the observer only keeps the event: it wakes no
// goroutine and nothing is formatted. With a subscriber it wakes the
// fan-out when that waits for an event, and then not again until the
// events waiting reach a quarter of the lag.
func TestHubObserverWakesNothingWithoutSubscribers(t *testing.T) {
	h := newHub(64, 16, 0, 100, nil) // urgent: 4
	h.pending()                      // the fan-out waits for an event
	for range 100 {                  // more than the ring holds
		record(h, hubEvent("k"), "")
	}
	if n := len(h.wake); n != 0 {
		t.Fatalf("woken %d times without a subscriber", n)
	}
	if h.pending() {
		t.Fatal("events pending without a subscriber")
	}
	h.deliver(nil, nil)
	for i := range h.out {
		if h.out[i].b != nil {
			t.Fatalf("event %d formatted without a subscriber", h.out[i].seq)
		}
	}

	sub, _, _ := h.join("", 0, false)
	record(h, hubEvent("k"), "")
	if n := len(h.wake); n != 1 {
		t.Fatalf("woken %d times for a subscriber's first event", n)
	}
	<-h.wake // the fan-out takes it, and gathers a batch
	for i := 2; i <= 4; i++ {
		record(h, hubEvent("k"), "")
		if n, want := len(h.wake), min(i/4, 1); n != want {
			t.Fatalf("%d events waiting: woken %d times, want %d", i, n, want)
		}
	}
	<-h.wake
	h.deliver(nil, nil)
	if b, ok := h.collect(sub); !ok || bytes.Count(b, []byte("\ndata: ")) != 4 {
		t.Fatalf("the subscriber collected %q, %v", b, ok)
	}

	// Once it leaves, the observer is quiet again.
	h.leave(sub)
	h.pending()
	for range 10 {
		record(h, hubEvent("k"), "")
	}
	if n := len(h.wake); n != 0 {
		t.Fatalf("woken %d times after the last subscriber left", n)
	}
}

// sseOf is what the stream carries for r: its id, and its data as
// json.Marshal writes it.
func sseOf(t *testing.T, r *rawEvent) string {
	t.Helper()
	e := eventOf(r)
	data, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("id: %d\ndata: %s\n\n", r.id, data)
}

// A subscriber that joins after events were made with nobody subscribed
// gets them from the raw ring, formatted as json.Marshal formats them,
// after its Last-Event-ID and within its prefix; then the events made
// after it joined, and no others. A resume from before what the ring
// holds gets what it holds, and is told of the rest.
func TestHubResumesEventsMadeWithNobodySubscribed(t *testing.T) {
	h := newHub(8, 8, 0, 100, nil)
	runHub(t, h)
	var made []rawEvent
	for i, key := range []string{"a/1", "b/<2>", "a/\u20283", "a/\xff4"} {
		ev := hubEvent(key)
		ev.Session, ev.Token, ev.Source = uint64(i+1), uint64(10+i), "owner & "+key
		record(h, ev, "client-"+key)
		made = append(made, rawEvent{id: 101 + uint64(i), ev: ev, client: "client-" + key})
	}
	sub, backlog, missed := h.join("a/", 101, true)
	want := sseOf(t, &made[2]) + sseOf(t, &made[3])
	if missed || string(backlog) != want {
		t.Fatalf("backlog (missed %v):\n%q\nwant\n%q", missed, backlog, want)
	}
	live, backlog, _ := h.join("", 0, false)
	if len(backlog) != 0 {
		t.Fatalf("a subscriber without Last-Event-ID got %q", backlog)
	}
	record(h, hubEvent("a/5"), "")
	for _, s := range []*subscriber{sub, live} {
		<-s.signal
		if b, ok := h.collect(s); !ok || !slices.Equal(ids(b), []string{"105"}) {
			t.Fatalf("after the join: %q, %v", b, ok)
		}
	}

	// Nobody subscribed while the ring wrapped.
	h.leave(sub)
	h.leave(live)
	for i := range 10 {
		record(h, hubEvent("c/"+strconv.Itoa(i)), "")
	}
	_, backlog, missed = h.join("", 105, true)
	if got := ids(backlog); !missed || !slices.Equal(got, []string{"108", "109", "110", "111", "112", "113", "114", "115"}) {
		t.Fatalf("after the ring wrapped: %v, missed %v", got, missed)
	}
	if _, _, missed := h.join("", 107, true); missed {
		t.Fatal("a resume from the ring's oldest event but one: missed")
	}
}

// A subscriber that collects one whole batch gets the batch's bytes as
// they are; one that collects more than a batch, or some of one, gets
// the events it wants copied, in order.
func TestHubCollectsWholeBatchesAndParts(t *testing.T) {
	h := newHub(64, 64, 0, 0, nil)
	all, _, _ := h.join("", 0, false)
	some, _, _ := h.join("a", 0, false)
	for _, key := range []string{"a1", "b2", "a3"} {
		record(h, hubEvent(key), "")
	}
	h.deliver(nil, nil)
	b, _ := h.collect(all)
	h.smu.RLock()
	first := h.out[1].b
	h.smu.RUnlock()
	if !slices.Equal(ids(b), []string{"1", "2", "3"}) || &b[0] != &first[0] || cap(b) != len(b) {
		t.Fatalf("a whole batch: %q (cap %d)", b, cap(b))
	}
	if b, _ := h.collect(some); !slices.Equal(ids(b), []string{"1", "3"}) {
		t.Fatalf("part of a batch: %v", ids(b))
	}
	for _, key := range []string{"a4", "a5"} {
		record(h, hubEvent(key), "")
		h.deliver(nil, nil)
	}
	for _, s := range []*subscriber{all, some} {
		if b, _ := h.collect(s); !slices.Equal(ids(b), []string{"4", "5"}) {
			t.Fatalf("two batches: %v", ids(b))
		}
	}
}
