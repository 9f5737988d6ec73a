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
	seq    uint64 // the hub's own count
	id     uint64 // the event's id, as the stream gives it
	gap    bool   // the node made no events of the entries before this one's since the last
	ev     mutex.Event
	client string // the client_id of the event's session, if it is one of ours
}

// formatted is an event ready to be written: its SSE lines.
type formatted struct {
	seq uint64
	id  uint64
	gap bool
	key string
	b   []byte
}

// hub keeps the events of the table in a ring and hands them to the
// stream's subscribers.
//
// The hub numbers events with its own sequence (seq), by which the rings
// are indexed, and gives each an id for the stream: on a single node the
// sequence itself, which starts at the clock; on a replicated node an id
// made from the event's log position (see eventID), the same on every
// node, so a subscriber may resume at another node.
//
// The node's observer (under the node's lock) only numbers an event and
// copies it into the raw ring, then wakes the fan-out goroutine; it never
// blocks. The fan-out goroutine formats new events once into the ring of
// formatted events and wakes the subscribers. Each subscriber's own
// goroutine takes, from that ring, the events after its cursor that match
// its prefix, and writes them; subscribers of one prefix woken by one
// batch share one copy of its bytes. A subscriber that falls more than
// maxLag events behind is dropped. Should the fan-out goroutine fall a
// whole ring behind the observer, the events it never saw are lost to
// every subscriber, and every subscriber is dropped, so that none
// silently misses an event.
//
// The fan-out is paced: it hands out a batch at most every pace(), which
// grows with the number of subscribers, so that the writes of all the
// streams together stay near a bound (maxStreamWrites a second) instead of
// growing with subscribers times events, and the lock path keeps the CPU.
// A backlog of a quarter of maxLag is handed out at once.
type hub struct {
	n       int           // ring size
	maxLag  uint64        // events a subscriber may be behind; at most n
	every   time.Duration // least time between batches; <= 0: no pacing
	dropped func()        // counts a dropped subscriber

	mu       sync.Mutex // the raw side; taken under the node's lock
	raw      []rawEvent
	last     uint64 // seq of the newest event
	lastID   uint64 // id of the newest event
	taken    uint64 // seq of the newest event the fan-out goroutine took
	wake     chan struct{}
	replaced func() uint64 // a replicated node's Replaced; nil for a single node
	seen     uint64        // what replaced said at the last event

	smu    sync.RWMutex // the stream side
	out    []formatted
	first  uint64 // seq of this run's first event
	sent   uint64 // seq of the newest event in out
	floor  uint64 // a replicated node made every event with an id above floor since it started, or since its last gap
	gapped bool   // a gap after the start
	subs   map[*subscriber]struct{}
	closed bool

	cmu    sync.Mutex       // the shared copies
	chunks map[string]chunk // by prefix, of the newest batch

	stop chan struct{}
}

// chunk is what a subscriber of prefix is owed for the events from..to:
// shared by every subscriber with that prefix and cursor, never modified.
type chunk struct {
	from, to uint64
	b        []byte
}

// Pacing of the fan-out: with s subscribers a batch goes out at most every
// max(every, s × streamWriteCost), and at least every maxPace, so the
// streams together make about maxStreamWrites writes a second at most.
const (
	maxStreamWrites = 20_000
	streamWriteCost = time.Second / maxStreamWrites
	maxPace         = 100 * time.Millisecond
)

// newHub returns a hub whose first event id follows base: the node's
// clock in Unix microseconds at start, so that ids increase across
// restarts as long as the clock does.
// every is the least time between two batches (<= 0: every batch at
// once, whatever the number of subscribers).
func newHub(n, maxLag int, every time.Duration, base uint64, dropped func()) *hub {
	return &hub{
		n: n, maxLag: uint64(min(maxLag, n)), every: every, dropped: dropped, chunks: make(map[string]chunk),
		raw: make([]rawEvent, n), last: base, taken: base, wake: make(chan struct{}, 1),
		out: make([]formatted, n), first: base + 1, sent: base, floor: base, subs: make(map[*subscriber]struct{}),
		stop: make(chan struct{}),
	}
}

// eventID returns the id of a replicated node's event made by the entry
// at position, after an event of id last: the position times 65,536 plus
// the event's rank among those of its entry, as fencing tokens are made,
// so that every node gives one event one id (an entry with more than
// 65,536 events pushes the next entry's ids up on the nodes that applied
// it).
func eventID(position, last uint64) uint64 {
	return max(position<<mutex.TokenShift, last+1)
}

// observe records ev. It is called with the node's lock held and never
// blocks.
func (h *hub) observe(ev mutex.Event, client string) {
	h.mu.Lock()
	h.last++
	r := rawEvent{seq: h.last, id: h.last, ev: ev, client: client}
	if h.replaced != nil {
		n := h.replaced()
		r.id, r.gap = eventID(ev.Position, h.lastID), h.lastID == 0 || n != h.seen
		h.seen = n
	}
	h.lastID = r.id
	h.raw[h.last%uint64(h.n)] = r
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
	var out time.Time // when the last batch went out
	timer := time.NewTimer(0)
	defer timer.Stop()
	var batch []rawEvent
	var fs []formatted
	for {
		select {
		case <-h.wake:
		case <-h.stop:
			return
		}
		if !h.gather(out, timer) {
			return
		}
		out = time.Now()
		batch, fs = h.deliver(batch[:0], fs[:0])
	}
}

// pace is the least time between two batches now.
func (h *hub) pace() time.Duration {
	if h.every <= 0 {
		return 0
	}
	h.smu.RLock()
	s := len(h.subs)
	h.smu.RUnlock()
	return min(max(h.every, time.Duration(s)*streamWriteCost), maxPace)
}

// gather waits until a batch may go out after the one that went out at
// out: the pace has passed, or the events waiting reach a quarter of
// maxLag. It reports false when the hub is closed meanwhile.
func (h *hub) gather(out time.Time, timer *time.Timer) bool {
	deadline := out.Add(h.pace())
	for {
		wait := time.Until(deadline)
		h.mu.Lock()
		backlog := h.last - h.taken
		h.mu.Unlock()
		if wait <= 0 || backlog >= max(h.maxLag/4, 1) {
			return true
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
			return true
		case <-h.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-h.stop:
			return false
		}
	}
}

// deliver formats every event the observer has recorded since the last
// batch into the formatted ring and wakes the subscribers that have
// something new, dropping those that fell behind. batch and fs are
// scratch space, returned for reuse.
func (h *hub) deliver(batch []rawEvent, fs []formatted) ([]rawEvent, []formatted) {
	lost := false
	var to uint64
	more := true
	for took := 0; more && took < h.n; took += maxTake {
		// Take at most maxTake events at a time: the observer waits for
		// mu under the node's lock.
		h.mu.Lock()
		from := h.taken + 1
		if h.last-h.taken > uint64(h.n) {
			lost = true
			from = h.last - uint64(h.n) + 1
			fs = fs[:0] // overwritten in the ring anyway
		}
		to = min(h.last, from+maxTake-1)
		start := len(batch)
		for id := from; id <= to; id++ {
			batch = append(batch, h.raw[id%uint64(h.n)])
		}
		h.taken = to
		more = to < h.last
		h.mu.Unlock()
		for i := start; i < len(batch); i++ {
			fs = append(fs, format(&batch[i]))
			batch[i] = rawEvent{}
		}
		batch = batch[:0]
	}
	if more { // the rest in the next batch, at once
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	if len(fs) > h.n {
		fs = fs[len(fs)-h.n:]
	}

	h.smu.Lock()
	before := h.sent
	for _, f := range fs {
		h.out[f.seq%uint64(h.n)] = f
		if f.gap {
			h.gapped = h.gapped || h.floor != 0
			h.floor = f.id - 1
		}
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
	h.cmu.Lock()
	clear(h.chunks)
	h.cmu.Unlock()
	h.smu.Unlock()
	for i := range fs {
		fs[i] = formatted{}
	}
	return batch, fs[:0]
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
	return formatted{seq: r.seq, id: r.id, gap: r.gap, key: ev.Key, b: b}
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
// returns the ring's events after the event of id after (for
// Last-Event-ID), and whether events since after are missing from the
// ring: it wrapped past them, the node made none of them (a replicated
// node before it started, or across a snapshot it was sent), or after is
// no id this node gave (0 asks for the whole ring of this run). It
// returns nil once the hub is closed.
func (h *hub) join(prefix string, after uint64, resume bool) (sub *subscriber, backlog []byte, missed bool) {
	h.smu.Lock()
	defer h.smu.Unlock()
	if h.closed {
		return nil, nil, false
	}
	sub = &subscriber{prefix: prefix, signal: make(chan struct{}, 1)}
	sub.cursor.Store(h.sent)
	h.subs[sub] = struct{}{}
	if !resume {
		return sub, nil, false
	}
	oldest := h.first
	if h.sent >= h.first+uint64(h.n) {
		oldest = h.sent - uint64(h.n) + 1
	}
	wrapped := oldest > h.first
	h.mu.Lock()
	newest := h.lastID // the fan-out may not have handed it out yet
	h.mu.Unlock()
	switch {
	case after > newest:
		after, missed = 0, true // not an id this node gave
	case after == 0:
		missed = wrapped || h.gapped
	default:
		missed = after < h.floor
		if f := &h.out[oldest%uint64(h.n)]; wrapped && f.seq == oldest && after+1 < f.id {
			missed = true
		}
	}
	// Events not handed out yet with an id up to after are passed over
	// as they come (collect).
	sub.skip = after
	for seq := oldest; seq <= h.sent; seq++ {
		f := &h.out[seq%uint64(h.n)]
		if f.seq != seq {
			missed = true // lost by a fan-out that fell a ring behind
			continue
		}
		if f.id > after && strings.HasPrefix(f.key, prefix) {
			backlog = append(backlog, f.b...)
		}
	}
	return sub, backlog, missed
}

// collect returns the events after sub's cursor that match its prefix,
// as the bytes to write, and moves the cursor to the newest event. The
// bytes may be shared with other subscribers: the caller must not modify
// them. It reports false when sub was dropped, or fell so far behind
// that the ring no longer holds what it is owed.
func (h *hub) collect(sub *subscriber) ([]byte, bool) {
	h.smu.RLock()
	defer h.smu.RUnlock()
	if sub.dropped.Load() {
		return nil, false
	}
	from, to := sub.cursor.Load()+1, h.sent
	if sub.skip != 0 && from <= to && h.out[from%uint64(h.n)].id > sub.skip {
		sub.skip = 0 // ids only grow: nothing more to pass over
	}
	h.cmu.Lock()
	defer h.cmu.Unlock()
	if c, ok := h.chunks[sub.prefix]; ok && c.from == from && c.to == to && sub.skip == 0 {
		sub.cursor.Store(to)
		return c.b, true
	}
	var b []byte
	for seq := from; seq <= to; seq++ {
		f := &h.out[seq%uint64(h.n)]
		if f.seq != seq {
			return nil, false
		}
		if f.id > sub.skip && strings.HasPrefix(f.key, sub.prefix) {
			b = append(b, f.b...)
		}
	}
	if sub.skip == 0 {
		h.chunks[sub.prefix] = chunk{from: from, to: to, b: b}
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
	skip    uint64        // events up to this id are passed over (a resume's); only its writer reads it
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
