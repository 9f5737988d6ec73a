package ratelimit

import (
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestBurstThenRate(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	r := New(10, 5, c.now)
	for i := range 5 {
		if !r.Allow("a") {
			t.Fatalf("request %d of a burst of 5 refused", i)
		}
	}
	if r.Allow("a") {
		t.Fatal("the sixth request at once was allowed")
	}
	if !r.Allow("b") {
		t.Fatal("another source shares a's bucket")
	}
	c.add(100 * time.Millisecond) // one request's worth at 10/s
	if !r.Allow("a") || r.Allow("a") {
		t.Fatal("after 100 ms exactly one more request should pass")
	}
	if d := r.RetryAfter(); d != 100*time.Millisecond {
		t.Errorf("RetryAfter = %v", d)
	}
}

func TestIdleBucketsAreDroppedFull(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	r := New(1, 1000, c.now) // the burst is cut to what a minute refills
	if r.burst != 60 {
		t.Fatalf("burst %d, want 60", r.burst)
	}
	for range 60 {
		r.Allow("a")
	}
	if r.Allow("a") {
		t.Fatal("a's bucket should be empty")
	}
	c.add(idleAfter + time.Second)
	r.Allow("b") // sweeps
	if r.Len() != 1 {
		t.Fatalf("%d buckets after a's minute of idleness, want 1", r.Len())
	}
	for i := range 60 {
		if !r.Allow("a") {
			t.Fatalf("request %d of a's refilled burst refused", i)
		}
	}
}

func TestNoLimit(t *testing.T) {
	var r *Rates = New(0, 0, nil)
	if r != nil || !r.Allow("a") || r.Len() != 0 || r.RetryAfter() != 0 {
		t.Fatal("a zero rate should allow everything")
	}
}
