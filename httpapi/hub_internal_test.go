package httpapi

import (
	"testing"
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
	h := newHub(4, 4, 100, func() { dropped++ })
	sub, _, _ := h.join("", 0, false)
	for range 9 { // more than the ring holds, before the fan-out runs
		h.observe(hubEvent("k"), "")
	}
	runHub(t, h)
	<-sub.signal
	if !sub.dropped.Load() {
		t.Fatal("not dropped")
	}
	if _, ok := h.collect(sub, nil); ok {
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
	h := newHub(8, 2, 0, nil)
	quiet, _, _ := h.join("x/", 0, false)
	all, _, _ := h.join("", 0, false)
	runHub(t, h)
	for i := range 5 {
		h.observe(hubEvent("y"), "")
		<-all.signal
		b, ok := h.collect(all, nil)
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
