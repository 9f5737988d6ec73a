// Package ratelimit limits the request rate of each source (a principal's
// name, or a client's IP address) with one token bucket per source, from
// golang.org/x/time/rate.
package ratelimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// idleAfter is how long a source's bucket is kept after its last request.
// A bucket left alone this long is full again (see Rates), so forgetting it
// changes nothing for the source.
const idleAfter = time.Minute

// Rates hands out one token bucket per source: Rate requests a second
// with bursts of Burst. A nil *Rates allows everything. It is safe for
// concurrent use; buckets idle for a minute are dropped, so memory follows
// the sources active in the last minute.
type Rates struct {
	limit rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	last time.Time
}

// New returns Rates of perSecond requests a second per source with bursts
// of burst (at least 1). perSecond 0 or less means no limit: New returns
// nil. now is the clock; nil means time.Now.
func New(perSecond float64, burst int, now func() time.Time) *Rates {
	if perSecond <= 0 {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	// A minute idle must refill the bucket, or dropping it would give a
	// source a fuller bucket than it had earned.
	burst = max(burst, 1)
	if float64(burst)/perSecond > idleAfter.Seconds() {
		burst = max(int(perSecond*idleAfter.Seconds()), 1)
	}
	return &Rates{limit: rate.Limit(perSecond), burst: burst, now: now, buckets: make(map[string]*bucket)}
}

// Allow takes one request of source from its bucket and reports whether
// the bucket had one: false means refuse the request.
func (r *Rates) Allow(source string) bool {
	if r == nil {
		return true
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.swept) > idleAfter {
		for k, b := range r.buckets {
			if now.Sub(b.last) > idleAfter {
				delete(r.buckets, k)
			}
		}
		r.swept = now
	}
	b := r.buckets[source]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(r.limit, r.burst)}
		r.buckets[source] = b
	}
	b.last = now
	return b.lim.AllowN(now, 1)
}

// RetryAfter returns how long a refused source should wait for its next
// request to be allowed: one request's worth of time, at least a second
// when rounded for an HTTP Retry-After.
func (r *Rates) RetryAfter() time.Duration {
	if r == nil {
		return 0
	}
	return time.Duration(float64(time.Second) / float64(r.limit))
}

// Len returns the number of buckets kept.
func (r *Rates) Len() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.buckets)
}
