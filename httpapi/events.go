package httpapi

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// eventJSON is one event of the stream, as its data line carries it.
type eventJSON struct {
	ID           uint64    `json:"id"`
	Action       string    `json:"action"`
	Key          string    `json:"key"`
	FencingToken uint64    `json:"fencing_token,omitempty"`
	Session      uint64    `json:"session,omitempty"`
	ClientID     string    `json:"client_id,omitempty"`
	Owner        string    `json:"owner"`
	Mode         string    `json:"mode"`
	Reason       string    `json:"reason,omitempty"`
	Time         time.Time `json:"time"`
}

// rawEvent is an event as the observer keeps it: formatting waits for the
// fan-out goroutine, off the node's lock.
type rawEvent struct {
	id     uint64
	ev     mutex.Event
	client string // the client_id of the event's session, if it is one of ours
}

// formatted is an event ready to be written: its SSE lines.
type formatted struct {
	id  uint64
	key string
	b   []byte
}

// hub keeps the events of the table in a ring and hands them to the
// stream's subscribers.
//
// The node's observer (under the node's lock) only numbers an event and
// copies it into the raw ring, then wakes the fan-out goroutine; it never
// blocks. The fan-out goroutine formats new events once into the ring of
// formatted events and wakes the subscribers. Each subscriber's own
// goroutine copies, from that ring, the events after its cursor that
// match its prefix, and writes them; nothing is copied per subscriber
// before it asks. A subscriber that falls more than maxLag events behind
// is dropped. Should the fan-out goroutine fall a whole ring behind the
// observer, the events it never saw are lost to every subscriber, and
// every subscriber is dropped, so that none silently misses an event.
type hub struct {
	n       int    // ring size
	maxLag  uint64 // events a subscriber may be behind; at most n
	dropped func() // counts a dropped subscriber

	mu    sync.Mutex // the raw side; taken under the node's lock
	raw   []rawEvent
	last  uint64 // id of the newest event
	taken uint64 // id of the newest event the fan-out goroutine took
	wake  chan struct{}

	smu    sync.RWMutex // the stream side
	out    []formatted
	first  uint64 // id of this run's first event
	sent   uint64 // id of the newest event in out
	subs   map[*subscriber]struct{}
	closed bool

	stop chan struct{}
}

// newHub returns a hub whose first event id follows base: the node's
// clock in Unix microseconds at start, so that ids increase across
// restarts as long as the clock does.
func newHub(n, maxLag int, base uint64, dropped func()) *hub {
	return &hub{
		n: n, maxLag: uint64(min(maxLag, n)), dropped: dropped,
		raw: make([]rawEvent, n), last: base, taken: base, wake: make(chan struct{}, 1),
		out: make([]formatted, n), first: base + 1, sent: base, subs: make(map[*subscriber]struct{}),
		stop: make(chan struct{}),
	}
}

// observe records ev. It is called with the node's lock held and never
// blocks.
func (h *hub) observe(ev mutex.Event, client string) {
	h.mu.Lock()
	h.last++
	h.raw[h.last%uint64(h.n)] = rawEvent{id: h.last, ev: ev, client: client}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// maxTake bounds the events the fan-out goroutine takes from the raw ring
// at once.
const maxTake = 256

// run is the fan-out goroutine; it returns when close is called.
func (h *hub) run() {
	var batch []rawEvent
	var fs []formatted
	for {
		select {
		case <-h.wake:
		case <-h.stop:
			return
		}
		// Take at most maxTake events at a time: the observer waits for
		// mu under the node's lock.
		h.mu.Lock()
		from := h.taken + 1
		lost := h.last-h.taken > uint64(h.n)
		if lost {
			from = h.last - uint64(h.n) + 1
		}
		to := min(h.last, from+maxTake-1)
		batch = batch[:0]
		for id := from; id <= to; id++ {
			batch = append(batch, h.raw[id%uint64(h.n)])
		}
		h.taken = to
		more := to < h.last
		h.mu.Unlock()
		if more {
			select {
			case h.wake <- struct{}{}:
			default:
			}
		}

		fs = fs[:0]
		for i := range batch {
			fs = append(fs, format(&batch[i]))
			batch[i] = rawEvent{}
		}

		h.smu.Lock()
		before := h.sent
		for _, f := range fs {
			h.out[f.id%uint64(h.n)] = f
		}
		h.sent = to
		for sub := range h.subs {
			switch {
			case lost || to-sub.cursor.Load() > h.maxLag:
				h.dropLocked(sub)
			case !matches(fs, sub.prefix) && sub.cursor.CompareAndSwap(before, to):
				// Caught up, and nothing for it: no need to wake it.
			default:
				sub.notify()
			}
		}
		h.smu.Unlock()
	}
}

// matches reports whether an event of fs has a key with prefix.
func matches(fs []formatted, prefix string) bool {
	for i := range fs {
		if strings.HasPrefix(fs[i].key, prefix) {
			return true
		}
	}
	return false
}

// format renders one event as its SSE lines.
func format(r *rawEvent) formatted {
	ev := &r.ev
	e := eventJSON{ID: r.id, Action: ev.Action(), Key: ev.Key, FencingToken: ev.Token, Session: ev.Session,
		ClientID: r.client, Owner: ev.Source, Mode: ev.Mode.String(), Time: ev.At.UTC()}
	if ev.Reason != mutex.ReasonNone {
		e.Reason = reasonName(ev.Reason)
	}
	data, _ := json.Marshal(&e) // a struct of strings, numbers and a time never fails
	b := make([]byte, 0, len(data)+32)
	b = append(b, "id: "...)
	b = appendUint(b, r.id)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	return formatted{id: r.id, key: ev.Key, b: b}
}

// reasonName is the reason as the API spells it: "lease_expired".
func reasonName(r mutex.Reason) string { return strings.ReplaceAll(r.String(), " ", "_") }

func appendUint(b []byte, v uint64) []byte {
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}

// join adds a subscriber of the keys with prefix. With resume it also
// returns the ring's events after id after (for Last-Event-ID), and
// whether events since after are missing from the ring: it wrapped past
// them, or after is from an earlier run (0 asks for the whole ring of
// this run). It returns nil once the hub is closed.
func (h *hub) join(prefix string, after uint64, resume bool) (sub *subscriber, backlog []byte, missed bool) {
	h.smu.Lock()
	defer h.smu.Unlock()
	if h.closed {
		return nil, nil, false
	}
	if resume {
		oldest := h.first
		if h.sent >= h.first+uint64(h.n) {
			oldest = h.sent - uint64(h.n) + 1
		}
		start := after + 1
		switch {
		case after > h.sent:
			start, missed = oldest, true // not an id this run gave
		case start < oldest:
			missed = after != 0 || oldest > h.first
			start = oldest
		}
		for id := start; id <= h.sent; id++ {
			f := &h.out[id%uint64(h.n)]
			if f.id != id {
				missed = true // lost by a fan-out that fell a ring behind
				continue
			}
			if strings.HasPrefix(f.key, prefix) {
				backlog = append(backlog, f.b...)
			}
		}
	}
	sub = &subscriber{prefix: prefix, signal: make(chan struct{}, 1)}
	sub.cursor.Store(h.sent)
	h.subs[sub] = struct{}{}
	return sub, backlog, missed
}

// collect appends to b the events after sub's cursor that match its
// prefix, and moves the cursor to the newest event. It reports false when
// sub was dropped, or fell so far behind that the ring no longer holds
// what it is owed.
func (h *hub) collect(sub *subscriber, b []byte) ([]byte, bool) {
	h.smu.RLock()
	defer h.smu.RUnlock()
	if sub.dropped.Load() {
		return b, false
	}
	to := h.sent
	for id := sub.cursor.Load() + 1; id <= to; id++ {
		f := &h.out[id%uint64(h.n)]
		if f.id != id {
			return b, false
		}
		if strings.HasPrefix(f.key, sub.prefix) {
			b = append(b, f.b...)
		}
	}
	sub.cursor.Store(to)
	return b, true
}

// leave removes sub.
func (h *hub) leave(sub *subscriber) {
	h.smu.Lock()
	delete(h.subs, sub)
	h.smu.Unlock()
}

// dropLocked ends sub for falling behind; smu is held.
func (h *hub) dropLocked(sub *subscriber) {
	delete(h.subs, sub)
	sub.drop()
	if h.dropped != nil {
		h.dropped()
	}
}

// subscribers returns the number of subscribers now.
func (h *hub) subscribers() int {
	h.smu.RLock()
	defer h.smu.RUnlock()
	return len(h.subs)
}

// close stops the fan-out goroutine and refuses new subscribers. It is
// safe to call more than once.
func (h *hub) close() {
	h.smu.Lock()
	defer h.smu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.stop)
	}
}

// subscriber is one event stream, written by its HTTP request's
// goroutine.
type subscriber struct {
	prefix  string
	cursor  atomic.Uint64 // id of the newest event written or passed over
	dropped atomic.Bool
	signal  chan struct{} // has something to write, or was dropped
}

func (s *subscriber) notify() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// drop marks the subscriber dropped and lets its writer know.
func (s *subscriber) drop() {
	s.dropped.Store(true)
	s.notify()
}
