package httpapi

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

func hubEvent(key string) mutex.Event {
	return mutex.Event{Kind: mutex.EventGranted, Key: key, Token: 1, Source: "w", At: time.Unix(1, 0)}
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
		h.observe(hubEvent("k"), "")
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
		h.observe(hubEvent("y"), "")
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
			h.observe(hubEvent("k"), "")
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
		h.observe(hubEvent("k"), "")
		<-sub.signal // the first batch goes out at once
		h.collect(sub)
		start := time.Now()
		for range 4 {
			h.observe(hubEvent("k"), "")
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
