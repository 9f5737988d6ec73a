package httpapi

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// eventJSON is one event of the stream, as its data line carries it. The
// stream writes it with eventFormat.appendEventJSON, which gives the bytes
// that json.Marshal gives for it: a field added here is added there too,
// in the same place (FuzzEventJSON holds the two to the same bytes).
type eventJSON struct {
	ID           uint64    `json:"id"`
	Action       string    `json:"action"`
	Key          string    `json:"key"`
	FencingToken uint64    `json:"fencing_token,omitempty"`
	Session      uint64    `json:"session,omitempty"`
	ClientID     string    `json:"client_id,omitempty"`
	Owner        string    `json:"owner"`
	Note         string    `json:"note,omitempty"`
	Mode         string    `json:"mode"`
	Reason       string    `json:"reason,omitempty"`
	Time         time.Time `json:"time"`
}

// rawEvent is an event as the observer keeps it, in the table's own form:
// it is formatted only for a subscriber.
type rawEvent struct {
	seq    uint64 // the hub's own count
	id     uint64 // the event's id, as the stream gives it
	ev     mutex.Event
	client string // the client_id of the event's session, if it is one of ours
}

// formatted is an event ready to be written: its SSE lines.
type formatted struct {
	seq   uint64
	id    uint64
	key   string
	b     []byte
	batch uint64 // the batch it was formatted in: the bytes of a batch's events follow each other
	off   int    // where b begins in the batch's bytes
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
// copies it, as the table made it, into the raw ring; it never blocks and
// formats nothing. The raw side is under the node's lock alone: the
// observer takes no lock of its own, and the hub's readers take the
// node's (Node.Locked) for at most maxTake events at a time. The raw ring
// is what a resume (Last-Event-ID) reads: join formats the events it is
// owed from there. While nobody subscribes, that is all an event costs:
// the observer wakes no goroutine, and no event is formatted.
//
// While there are subscribers, the fan-out goroutine formats the new
// events once, into the ring of formatted events (eventFormat, without
// encoding/json's reflection), and wakes the subscribers. The observer
// wakes the fan-out only when it waits for a first event, or when the
// events waiting reach urgent (a quarter of maxLag); otherwise the
// fan-out sleeps until its pace has passed. Each subscriber's own
// goroutine takes, from the formatted ring, the events after its cursor
// that match its prefix, and writes them; subscribers of one prefix woken
// by one batch share one copy of its bytes. A subscriber that falls more
// than maxLag events behind is dropped. Should the fan-out goroutine fall
// a whole ring behind the observer, the events it never saw are lost to
// every subscriber, and every subscriber is dropped, so that none
// silently misses an event. The first subscriber after a time without any
// starts the fan-out after the newest event: those made while nobody
// listened are in the raw ring only.
//
// The fan-out is paced: it hands out a batch at most every pace(), which
// grows with the number of subscribers, so that the writes of all the
// streams together stay near a bound (maxStreamWrites a second) instead of
// growing with subscribers times events, and the lock path keeps the CPU.
// A backlog of urgent events is handed out at once.
type hub struct {
	n       int           // ring size
	maxLag  uint64        // events a subscriber may be behind; at most n
	urgent  uint64        // events waiting that are handed out at once
	every   time.Duration // least time between batches; <= 0: no pacing
	dropped func()        // counts a dropped subscriber
	first   uint64        // seq of this run's first event

	// The raw side: written by observe, under the node's lock, and read
	// under it (lock), so that the observer takes no lock of its own.
	lock      func(f func()) // runs f under the node's lock (Node.Locked)
	raw       []rawEvent
	last      uint64 // seq of the newest event
	lastID    uint64 // id of the newest event
	taken     uint64 // seq of the newest event the fan-out took, or passed over
	listening bool   // there are subscribers: the fan-out takes the events
	idle      bool   // the fan-out waits for an event: the next one wakes it
	wake      chan struct{}
	replaced  func() uint64 // a replicated node's Replaced; nil for a single node
	seen      uint64        // what replaced said at the last event
	floor     uint64        // a replicated node made every event with an id above floor since it started, or since its last gap
	gapped    bool          // a gap after the start

	smu     sync.RWMutex // the stream side; held by the fan-out while it formats
	out     []formatted
	sent    uint64 // seq of the newest event in out, or passed over
	batches uint64 // batches formatted
	format  eventFormat
	subs    map[*subscriber]struct{}
	closed  bool

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
//
// The hub's raw side is under a lock of its own until lock is set to the
// node's (a hub without a node: tests). Its observe must then be called
// under that lock.
func newHub(n, maxLag int, every time.Duration, base uint64, dropped func()) *hub {
	lag := uint64(min(maxLag, n))
	var mu sync.Mutex
	return &hub{
		lock: func(f func()) {
			mu.Lock()
			defer mu.Unlock()
			f()
		},
		n: n, maxLag: lag, urgent: max(lag/4, 1), every: every, dropped: dropped, first: base + 1,
		raw: make([]rawEvent, n), last: base, taken: base, floor: base, wake: make(chan struct{}, 1),
		out: make([]formatted, n), sent: base, subs: make(map[*subscriber]struct{}),
		chunks: make(map[string]chunk), stop: make(chan struct{}),
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

// observe records ev. It is called with the node's lock held (the lock
// of the raw side): it takes no lock, never blocks, formats nothing, and
// wakes the fan-out goroutine only when there are subscribers and the
// fan-out waits for this event (see hub).
func (h *hub) observe(ev mutex.Event, client string) {
	h.last++
	r := &h.raw[h.last%uint64(h.n)]
	*r = rawEvent{seq: h.last, id: h.last, ev: ev, client: client}
	if h.replaced != nil {
		r.id = eventID(ev.Position, h.lastID)
		if n := h.replaced(); h.lastID == 0 || n != h.seen {
			// The node made no events of the entries before this one's
			// since the last: it started, or a snapshot replaced its
			// table.
			h.gapped = h.gapped || h.floor != 0
			h.floor = r.id - 1
			h.seen = n
		}
	}
	h.lastID = r.id
	wake := h.listening && (h.idle || h.last-h.taken == h.urgent)
	if wake {
		h.idle = false
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// maxTake bounds the events taken from the raw ring at once, under the
// node's lock.
const maxTake = 256

// run is the fan-out goroutine; it returns when close is called.
func (h *hub) run() {
	var out time.Time // when the last batch went out
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var batch []rawEvent
	var fs []formatted
	for {
		if !h.pending() {
			select {
			case <-h.wake:
				continue
			case <-h.stop:
				return
			}
		}
		if !h.gather(out, timer) {
			return
		}
		out = time.Now()
		batch, fs = h.deliver(batch[:0], fs[:0])
	}
}

// pending reports whether there are subscribers and events for them that
// the fan-out has not taken; when there are none, the fan-out is idle
// from now on, for the next event of a subscriber's time to wake it.
func (h *hub) pending() (p bool) {
	h.lock(func() {
		h.idle = !h.listening || h.last == h.taken
		p = !h.idle
	})
	return p
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
// out: the pace has passed, or the events waiting reach urgent. It
// reports false when the hub is closed meanwhile.
func (h *hub) gather(out time.Time, timer *time.Timer) bool {
	deadline := out.Add(h.pace())
	for {
		wait := time.Until(deadline)
		var backlog uint64
		h.lock(func() { backlog = h.last - h.taken })
		if wait <= 0 || backlog >= h.urgent {
			return true
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
			return true
		case <-h.wake:
			timer.Stop()
		case <-h.stop:
			timer.Stop()
			return false
		}
	}
}

// deliver formats every event the observer has recorded since the last
// batch into the formatted ring and wakes the subscribers that have
// something new, dropping those that fell behind. Without subscribers it
// does nothing: the next to join passes over those events. batch and fs
// are scratch space, returned for reuse.
func (h *hub) deliver(batch []rawEvent, fs []formatted) ([]rawEvent, []formatted) {
	// smu is held throughout, so that a join finds no batch half made.
	h.smu.Lock()
	defer h.smu.Unlock()
	if len(h.subs) == 0 {
		return batch, fs
	}
	lost := false
	var to uint64
	for more := true; more && len(batch) < h.n; {
		// At most maxTake events at a time, under the node's lock.
		h.lock(func() {
			from := h.taken + 1
			if h.last-h.taken > uint64(h.n) {
				lost = true
				from = h.last - uint64(h.n) + 1
				clear(batch)
				batch = batch[:0] // overwritten in the ring anyway
			}
			to = min(h.last, from+maxTake-1)
			for seq := from; seq <= to; seq++ {
				batch = append(batch, h.raw[seq%uint64(h.n)])
			}
			h.taken = to
			more = to < h.last
		})
	}
	if len(batch) > h.n {
		clear(batch[:len(batch)-h.n])
		batch = batch[len(batch)-h.n:]
	}
	h.batches++
	fs = h.format.appendFormatted(fs, batch, h.batches)
	clear(batch)

	before := h.sent
	for _, f := range fs {
		h.out[f.seq%uint64(h.n)] = f
	}
	h.sent = to
	drops := false
	for sub := range h.subs {
		switch {
		case lost || to-sub.cursor.Load() > h.maxLag:
			h.dropLocked(sub)
			drops = true
		case !matches(fs, sub.prefix) && sub.cursor.CompareAndSwap(before, to):
			// Caught up, and nothing for it: no need to wake it.
		default:
			sub.notify()
		}
	}
	if drops {
		h.listen()
	}
	h.cmu.Lock()
	clear(h.chunks)
	h.cmu.Unlock()
	clear(fs)
	return batch[:0], fs[:0]
}

// appendFormatted appends the events of batch to fs, formatted, their
// bytes one after another in one buffer.
func (f *eventFormat) appendFormatted(fs []formatted, batch []rawEvent, number uint64) []formatted {
	buf := make([]byte, 0, len(batch)*formattedSize)
	first := len(fs)
	for i := range batch {
		r := &batch[i]
		fs = append(fs, formatted{seq: r.seq, id: r.id, key: r.ev.Key, batch: number, off: len(buf)})
		buf = f.appendSSE(buf, r)
	}
	// Now that buf is whole: each b's capacity runs on to its end, over
	// the events after it (collect).
	for i := first; i < len(fs); i++ {
		end := len(buf)
		if i+1 < len(fs) {
			end = fs[i+1].off
		}
		fs[i].b = buf[fs[i].off:end]
	}
	return fs
}

// formattedSize is about the size of an event's SSE lines, for the
// buffers they are formatted into.
const formattedSize = 256

// reasonNames are the reasons as the API spells them: "lease_expired".
var reasonNames = func() (t [256]string) {
	for r := range t {
		t[r] = strings.ReplaceAll(mutex.Reason(r).String(), " ", "_")
	}
	return t
}()

// reasonName is the reason as the API spells it.
func reasonName(r mutex.Reason) string { return reasonNames[r] }

// eventOf is the data of the stream's event r.
func eventOf(r *rawEvent) eventJSON {
	ev := &r.ev
	e := eventJSON{ID: r.id, Action: ev.Action(), Key: ev.Key, FencingToken: ev.Token, Session: ev.Session,
		ClientID: r.client, Owner: ev.Source, Note: ev.Note, Mode: ev.Mode.String(), Time: ev.At.UTC()}
	if ev.Reason != mutex.ReasonNone {
		e.Reason = reasonName(ev.Reason)
	}
	return e
}

// appendSSE appends the stream's event r: its id line and its data line.
func (f *eventFormat) appendSSE(b []byte, r *rawEvent) []byte {
	e := eventOf(r)
	b = strconv.AppendUint(append(b, "id: "...), r.id, 10)
	b = f.appendEventJSON(append(b, "\ndata: "...), &e)
	return append(b, "\n\n"...)
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

// listen tells the observer whether there are subscribers; smu is held.
func (h *hub) listen() {
	n := len(h.subs)
	h.lock(func() { h.listening = n > 0 })
}

// join adds a subscriber of the keys with prefix. With resume it also
// returns the ring's events after the event of id after (for
// Last-Event-ID), formatted, and whether events since after are missing
// from the ring: it wrapped past them, the node made none of them (a
// replicated node before it started, or across a snapshot it was sent),
// or after is no id this node gave (0 asks for the whole ring of this
// run). It returns nil once the hub is closed.
func (h *hub) join(prefix string, after uint64, resume bool) (sub *subscriber, backlog []byte, missed bool) {
	h.smu.Lock()
	if h.closed {
		h.smu.Unlock()
		return nil, nil, false
	}
	idle := len(h.subs) == 0
	var newest, floor uint64
	var gapped bool
	h.lock(func() {
		if idle {
			// The events made since the last subscriber left were never
			// taken: the fan-out starts after the newest, and a resume
			// reads those it is owed from the raw ring.
			h.taken, h.sent, h.listening = h.last, h.last, true
		}
		newest, floor, gapped = h.lastID, h.floor, h.gapped
	})
	if idle {
		h.cmu.Lock()
		clear(h.chunks) // of a batch before the passing over
		h.cmu.Unlock()
	}
	sub = &subscriber{prefix: prefix, signal: make(chan struct{}, 1)}
	sub.cursor.Store(h.sent)
	h.subs[sub] = struct{}{}
	if !resume {
		h.smu.Unlock()
		return sub, nil, false
	}
	switch {
	case after > newest:
		after, missed = 0, true // not an id this node gave
	case after == 0:
		missed = gapped
	default:
		missed = after < floor
	}
	// The backlog is of the events up to sent; the fan-out hands out
	// those after it. Those not handed out yet with an id up to after
	// are passed over as they come (collect).
	sub.skip = after
	evs, lost := h.owed(prefix, after, h.sent)
	h.smu.Unlock()
	var f eventFormat
	for i := range evs {
		backlog = f.appendSSE(backlog, &evs[i])
	}
	return sub, backlog, missed || lost
}

// owed returns the events of the raw ring up to seq upto whose id is
// above after and whose key begins with prefix, and whether events after
// after are gone from the ring: it wrapped past them, or they were
// overwritten while owed read them.
func (h *hub) owed(prefix string, after, upto uint64) (evs []rawEvent, lost bool) {
	oldest := h.first
	h.lock(func() {
		if h.last >= h.first+uint64(h.n) {
			oldest = h.last - uint64(h.n) + 1
			if r := &h.raw[oldest%uint64(h.n)]; after == 0 || after+1 < r.id {
				lost = true // wrapped past events after after
			}
		}
	})
	for from := oldest; from <= upto; from += maxTake {
		// At most maxTake events at a time, under the node's lock.
		h.lock(func() {
			for seq := from; seq <= min(upto, from+maxTake-1); seq++ {
				r := &h.raw[seq%uint64(h.n)]
				switch {
				case r.seq != seq:
					lost = true // overwritten since
				case r.id > after && strings.HasPrefix(r.ev.Key, prefix):
					evs = append(evs, *r)
				}
			}
		})
	}
	return evs, lost
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
	// Every event wanted, of one batch: its bytes as they are.
	whole := true
	for seq := from; seq <= to; seq++ {
		f := &h.out[seq%uint64(h.n)]
		if f.seq != seq {
			return nil, false
		}
		whole = whole && f.batch == h.out[from%uint64(h.n)].batch && f.id > sub.skip && strings.HasPrefix(f.key, sub.prefix)
	}
	var b []byte
	switch {
	case from > to:
	case whole:
		f, l := &h.out[from%uint64(h.n)], &h.out[to%uint64(h.n)]
		n := l.off + len(l.b) - f.off
		b = f.b[:n:n]
	default:
		for seq := from; seq <= to; seq++ {
			if f := &h.out[seq%uint64(h.n)]; f.id > sub.skip && strings.HasPrefix(f.key, sub.prefix) {
				b = append(b, f.b...)
			}
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
	h.listen()
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
