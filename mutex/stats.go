package mutex

import (
	"sort"
	"time"
)

// WaitBuckets are the upper bounds, in seconds, of the histogram of the
// wait from a lock request to its grant. They span a handoff on loopback
// (about 100 µs) to a queue that drains in minutes.
var WaitBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

// Histogram is a snapshot of a cumulative histogram in Prometheus' shape.
type Histogram struct {
	Count   uint64
	Sum     float64            // seconds
	Buckets map[float64]uint64 // upper bound in seconds -> cumulative count
}

// histogram counts observations per bucket (not cumulative).
type histogram struct {
	counts []uint64 // one per WaitBuckets entry, plus +Inf
	sum    float64
	n      uint64
}

func newHistogram() histogram {
	return histogram{counts: make([]uint64, len(WaitBuckets)+1)}
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	if s < 0 {
		s = 0
	}
	i := sort.SearchFloat64s(WaitBuckets, s)
	h.counts[i]++
	h.sum += s
	h.n++
}

func (h *histogram) snapshot() Histogram {
	out := Histogram{Count: h.n, Sum: h.sum, Buckets: make(map[float64]uint64, len(WaitBuckets))}
	var cum uint64
	for i, ub := range WaitBuckets {
		cum += h.counts[i]
		out.Buckets[ub] = cum
	}
	return out
}

// stats are the table's counters since it was made.
type stats struct {
	Grants    uint64    // grants made, at once or from a queue
	Busy      uint64    // try-locks answered busy
	Withdrawn uint64    // parked requests withdrawn before a grant
	Parked    int       // parked requests now
	Wait      histogram // wait from request to grant
}

// Holder is one held key in a Snapshot.
type Holder struct {
	Grant
	Waiters int // requests parked behind the holder
}

// Snapshot is a consistent copy of the table at one instant.
type Snapshot struct {
	Taken     time.Time
	Holders   []Holder // sorted by key
	Parked    int
	Grants    uint64
	Busy      uint64
	Withdrawn uint64
	Wait      Histogram
}

// Snapshot copies the table's holders and counters. Holders are sorted by
// key bytes. It costs O(keys) and holds the table's lock for the copy only.
func (t *Table) Snapshot() Snapshot {
	t.mu.Lock()
	s := Snapshot{
		Taken:     t.now(),
		Holders:   make([]Holder, 0, len(t.keys)),
		Parked:    t.stats.Parked,
		Grants:    t.stats.Grants,
		Busy:      t.stats.Busy,
		Withdrawn: t.stats.Withdrawn,
		Wait:      t.stats.Wait.snapshot(),
	}
	for key, e := range t.keys {
		if e.holder.id == 0 {
			continue
		}
		h := Holder{Grant: t.grant(key, e.holder)}
		if e.queue != nil {
			h.Waiters = e.queue.n
		}
		s.Holders = append(s.Holders, h)
	}
	t.mu.Unlock()
	sort.Slice(s.Holders, func(a, b int) bool { return s.Holders[a].Key < s.Holders[b].Key })
	return s
}
