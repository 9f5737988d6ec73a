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
	if d <= 0 { // a grant without a wait: the first bucket
		h.counts[0]++
		h.n++
		return
	}
	s := d.Seconds()
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

// Holder is one holder of a key in a Snapshot.
type Holder struct {
	Key        string
	Token      uint64 // fencing token
	Session    uint64 // the holding session; 0 for a v1 holder
	Source     string // the owner as the client named it, or its peer IP
	RemoteAddr string // ip:port of the connection that won the key
	Acquired   time.Time
	Mode       Mode
	Count      uint32        // reentrancy, at least 1
	Limit      uint32        // the key's limit: 1, or N for a semaphore
	Leased     bool          // the lock has a lease of its own
	LeaseLeft  time.Duration // what is left of it, when Leased
	Delay      time.Duration // lock-delay the key gets if this lock is lost by expiry
	Waiters    int           // requests parked for the key
	Note       string        // the holder's note; empty for none (and for a v1 holder)
}

// holderInfo returns h, a holder of key, as a Holder at ns (Unix
// nanoseconds, the node's clock); lim is the key's limit and waiters its
// queue's length.
func (t *Table) holderInfo(key string, h *holder, lim uint32, waiters int, ns int64) Holder {
	out := Holder{Key: key, Token: h.token, Source: h.source.Value(), RemoteAddr: h.remote,
		Acquired: time.Unix(0, h.acquired), Mode: Exclusive, Count: 1, Limit: lim, Waiters: waiters}
	if hs := h.s; hs != nil {
		out.Session, out.Mode, out.Count, out.Note = hs.sess.id, hs.mode, hs.count, hs.note
		out.Delay = time.Duration(hs.delayFor)
		if hs.leaseFor > 0 {
			out.Leased, out.LeaseLeft = true, t.leaseLeft(hs, ns)
		}
	}
	return out
}

// Held returns how long h has been held at now, never less than zero.
func (h Holder) Held(now time.Time) time.Duration { return max(now.Sub(h.Acquired), 0) }

// SessionInfo is one session in a Snapshot.
type SessionInfo struct {
	ID         uint64
	Name       string
	Account    string // who it is charged to (Command.Account); empty: nobody
	TTL        time.Duration
	Held       int           // locks it holds
	Parked     int           // requests it has waiting
	RemoteAddr string        // of its current connection; empty when none
	Idle       time.Duration // since the node last heard from it
}

// Snapshot is a consistent copy of the table at one instant.
type Snapshot struct {
	Taken    time.Time
	Holders  []Holder // sorted by key bytes, then token
	Sessions []SessionInfo
	Parked   int // requests waiting, all keys
	Delayed  int // keys in lock-delay
	// LastToken is the highest fencing token handed out.
	LastToken uint64
	Counters  CounterSnapshot
}

// CounterSnapshot is a copy of the table's and node's counters.
type CounterSnapshot struct {
	Grants, Busy, Withdrawn, Deadlocks             uint64
	SessionsOpened, SessionExpiries, LeaseExpiries uint64
	Resumes                                        uint64
	Wait                                           Histogram
	// Refusals counts refusals by reason (indexed by Refusal): the front
	// ends' and the table's caps.
	Refusals [numRefusals]uint64
}

// snapshot copies the table at now. Sessions are sorted by id.
func (t *Table) snapshot(now time.Time) Snapshot {
	ns := now.UnixNano()
	s := Snapshot{
		Taken:     now,
		Holders:   make([]Holder, 0, len(t.keys)),
		Sessions:  make([]SessionInfo, 0, len(t.sessions)),
		Parked:    len(t.parked),
		LastToken: t.lastToken,
		Counters: CounterSnapshot{
			Grants: t.stats.Grants, Busy: t.stats.Busy, Withdrawn: t.stats.Withdrawn,
			Deadlocks: t.stats.Deadlocks, SessionsOpened: t.stats.SessionsOpened,
			SessionExpiries: t.stats.SessionExpiries, LeaseExpiries: t.stats.LeaseExpiries,
			Wait: t.stats.Wait.snapshot(),
		},
	}
	s.Counters.Refusals[RefusedHeld] = t.stats.OverHeld
	s.Counters.Refusals[RefusedParked] = t.stats.OverParked
	for key, e := range t.keys {
		if e.delayed() {
			s.Delayed++
		}
		lim, waiters := e.limit(), e.queueLen()
		e.eachHolder(func(h *holder) { s.Holders = append(s.Holders, t.holderInfo(key, h, lim, waiters, ns)) })
	}
	for _, ss := range t.sessions {
		s.Sessions = append(s.Sessions, SessionInfo{ID: ss.id, Name: ss.name.Value(), Account: ss.account.Value(),
			TTL: time.Duration(ss.ttl), Held: ss.heldN, Parked: ss.parkedN})
	}
	sort.Slice(s.Holders, func(a, b int) bool {
		ha, hb := s.Holders[a], s.Holders[b]
		if ha.Key != hb.Key {
			return ha.Key < hb.Key
		}
		return ha.Token < hb.Token
	})
	sort.Slice(s.Sessions, func(a, b int) bool { return s.Sessions[a].ID < s.Sessions[b].ID })
	return s
}
