package lockingcenter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// ErrSlowConsumer: a watch fell too far behind and was dropped, by the
// server (its session owed it 10,000 frames) or by the client (10,000
// events received and not yet taken from the channel). Watch again to go
// on; what happened in between is lost.
var ErrSlowConsumer = errors.New("lockingcenter: the watch fell too far behind")

// maxWatchBacklog bounds the events a watch holds for a consumer that has
// not taken them, as the server bounds what it holds for a session.
const maxWatchBacklog = 10_000

// KeyInfo is a key as Session.Describe found it, at one instant.
type KeyInfo struct {
	Key string
	// Holders: none when the key is free; one, or several when it is
	// shared or a semaphore, in the order of their grants.
	Holders []KeyHolder
	// Queue is the number of requests waiting for the key.
	Queue int
	// DelayLeft is what is left of the key's lock-delay (whole
	// milliseconds); 0 when it has none.
	DelayLeft time.Duration
}

// KeyHolder is one holder of a key. Durations are the server's, in whole
// milliseconds (held for rounds up, saturating at about 49 days).
type KeyHolder struct {
	Token   uint64 // its fencing token
	Name    string // its source: a session's name, or a v1 client's source
	Session uint64 // the holding session's id; 0 for a v1 holder
	Shared  bool   // held in shared mode
	Count   uint32 // reentrancy count, at least 1
	HeldFor time.Duration
	// Leased tells whether the lock has a lease of its own; LeaseLeft is
	// what is left of it then.
	Leased    bool
	LeaseLeft time.Duration
	// Note is the holder's note (WithNote); empty when it gave none.
	Note string
}

// Describe returns what the server knows of key (1 to 127 bytes): its
// holders, its queue and its lock-delay. It waits for the answer at most
// the session's read timeout (WithReadTimeout), through a reconnection.
// In a cluster the leader answers, after it has confirmed its leadership
// and applied every change committed before. Errors: ErrInvalidKey (nothing
// sent); ctx's error; an error matching os.ErrDeadlineExceeded when no
// answer came in time; the session's Err once it has ended; ErrFailed
// for a refusal, with the server's words.
func (s *Session) Describe(ctx context.Context, key string) (KeyInfo, error) {
	if key == "" || len(key) > MaxKeyLen {
		return KeyInfo{}, fmt.Errorf("describe %q: %w", key, ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return KeyInfo{}, fmt.Errorf("describe %q: %w", key, err)
	}
	r := &request{typ: frameDescribe, key: key, result: make(chan result, 1)}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return KeyInfo{}, fmt.Errorf("describe %q: %w", key, err)
	}
	s.enqueue(r, []field{strField(tagKey, key)})
	s.mu.Unlock()
	res, err := within(s, ctx, r.result)
	if err != nil {
		s.mu.Lock()
		if s.inflight[r.id] == r {
			delete(s.inflight, r.id)
		}
		s.mu.Unlock()
		return KeyInfo{}, fmt.Errorf("describe %q at %s: %w", key, s.addr, err)
	}
	return res.info, res.err
}

// describe sends a DESCRIBE of key whose answer goes to f, called with
// s.mu held, in the order of the session's other frames. Called with s.mu
// held.
func (s *Session) describe(key string, f func(KeyInfo, error)) {
	s.enqueue(&request{typ: frameDescribe, key: key, onInfo: f}, []field{strField(tagKey, key)})
}

// within waits for ch, at most the read timeout and while ctx lives.
func within[T any](s *Session, ctx context.Context, ch <-chan T) (T, error) {
	var timeout <-chan time.Time
	if s.cfg.readTimeout > 0 {
		t := time.NewTimer(s.cfg.readTimeout)
		defer t.Stop()
		timeout = t.C
	}
	var zero T
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-timeout:
		return zero, fmt.Errorf("no answer within %v: %w", s.cfg.readTimeout, os.ErrDeadlineExceeded)
	}
}

// parseInfo decodes an INFO frame.
func parseInfo(f *frame) (KeyInfo, error) {
	key, _ := f.get(tagKey)
	queue, _ := f.uint(tagQueue)
	delay, _ := f.uint(tagLeft)
	info := KeyInfo{Key: string(key), Queue: int(queue), DelayLeft: time.Duration(delay) * time.Millisecond}
	items, err := f.items(tagHolder)
	if err != nil {
		return KeyInfo{}, err
	}
	for _, it := range items {
		token, _ := it.uint(tagToken)
		name, _ := it.get(tagName)
		session, _ := it.uint(tagSession)
		held, _ := it.uint(tagHeldFor)
		mode, _ := it.uint(tagMode)
		count, _ := it.uint(tagCount)
		left, leased := it.uint(tagLeft)
		note, _ := it.get(tagNote)
		info.Holders = append(info.Holders, KeyHolder{Token: token, Name: string(name), Session: session,
			Shared: mode == 1, Count: uint32(max(count, 1)), HeldFor: time.Duration(held) * time.Millisecond,
			Leased: leased, LeaseLeft: time.Duration(left) * time.Millisecond, Note: string(note)})
	}
	return info, nil
}

// EventType says what an Event reports.
type EventType uint8

// Event types. The first six come from the server; EventGap comes from
// the client.
const (
	// EventAcquired: a grant, at once or after a wait. Token is the new
	// lock's.
	EventAcquired EventType = 1
	// EventReleased: a holder let the key go (also a grant undone because
	// it could not be delivered or made durable).
	EventReleased EventType = 2
	// EventExpired: a lock lost to its lease or to its session's TTL.
	EventExpired EventType = 3
	// EventReset: a lock taken by a reset.
	EventReset EventType = 4
	// EventWithdrawn: a waiting request left its queue without the key
	// (its wait ran out, it was cancelled, its session ended, a reset).
	// Token is 0.
	EventWithdrawn EventType = 5
	// EventDeadlock: an acquire was refused because its wait would close
	// a cycle. Token is 0.
	EventDeadlock EventType = 6
	// EventGap: the connection dropped and the watch was set up again on
	// the resumed one; events from the drop until this one may be missing.
	// Only At is set.
	EventGap EventType = 0x80
)

var eventTypeNames = map[EventType]string{
	EventAcquired: "acquired", EventReleased: "released", EventExpired: "expired", EventReset: "reset",
	EventWithdrawn: "withdrawn", EventDeadlock: "deadlock", EventGap: "gap",
}

// String names the type as docs/protocol.md does.
func (t EventType) String() string {
	if n, ok := eventTypeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("event %d", uint8(t))
}

// Event is one thing that happened to a key, as a watch reports it.
type Event struct {
	Type    EventType
	Key     string
	Token   uint64    // the lock's fencing token; 0 for a withdrawal or a deadlock
	Session uint64    // the holder's or requester's session; 0 for v1
	Name    string    // its source: the session's name, or a v1 client's source
	At      time.Time // when it happened, by the server's clock (whole milliseconds)
	Note    string    // an acquired event: the holder's note (WithNote), if it gave one
}

// Watcher is one watch of a key prefix, from Session.Watch until it ends.
// Its methods are safe for concurrent use.
type Watcher struct {
	s      *Session
	w      *watcher
	box    *outbox[Event]
	prefix string

	// Guarded by s.mu.
	err        error       // why the watch ended
	stopCancel func() bool // stops the watch's context.AfterFunc

	stopOnce sync.Once
}

// Watch streams the events of every key that begins with prefix (at most
// 127 bytes; empty: every key), whatever protocol their holders and
// waiters use, from the moment Watch returns. It waits for the server to
// confirm the watch, at most the session's read timeout. The watch lasts
// until ctx ends, Close, the session's end, or its drop as a slow
// consumer; then Events is closed and Err says why.
//
// Events is never held up by the session's locks, nor they by it: events
// wait for the consumer in the Watcher, up to 10,000; one more ends the
// watch with ErrSlowConsumer, as does the server when the session falls
// 10,000 frames behind.
//
// Across a reconnection: the session resumes and sets the watch up again,
// then Events delivers an EventGap. Events from the drop until the gap may
// be missing: those the server wrote to the dropped connection, and all
// of them when the server restarted or a new cluster leader took the
// session over (the server queues the rest for the session and they come
// before the gap). No event is delivered twice. A consumer that keeps
// state from events reads it again at a gap (Describe).
//
// Errors: ErrInvalidKey for a long prefix (nothing sent); ctx's error; an
// error matching os.ErrDeadlineExceeded when the server did not confirm
// in time; the session's Err once it has ended; ErrFailed for a refusal.
func (s *Session) Watch(ctx context.Context, prefix string) (*Watcher, error) {
	if len(prefix) > MaxKeyLen {
		return nil, fmt.Errorf("watch %q: %w", prefix, ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("watch %q: %w", prefix, err)
	}
	wt := &Watcher{s: s, prefix: prefix, box: newOutbox[Event](maxWatchBacklog)}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		wt.box.stop()
		return nil, fmt.Errorf("watch %q: %w", prefix, err)
	}
	wt.w = s.startWatch(prefix, wt)
	s.mu.Unlock()
	err, werr := within(s, ctx, wt.w.started)
	if werr != nil {
		err = fmt.Errorf("watch %q at %s: %w", prefix, s.addr, werr)
	}
	if err != nil {
		wt.stop(err)
		return nil, err
	}
	s.mu.Lock()
	wt.stopCancel = context.AfterFunc(ctx, func() { wt.stop(fmt.Errorf("watch %q: %w", prefix, ctx.Err())) })
	s.mu.Unlock()
	return wt, nil
}

// Events delivers the watch's events in the order the server made them,
// and is closed when the watch ends. Take them promptly (see Watch).
func (w *Watcher) Events() <-chan Event { return w.box.ch }

// Err returns nil while the watch lasts, then why it ended: ctx's error
// (context.Canceled after Close), ErrSlowConsumer, or an error matching
// the session's Err. Events still delivers what arrived before the end,
// except after Close, the end of ctx, or Session.Close.
func (w *Watcher) Err() error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.err
}

// Close ends the watch: the server is told, Events is closed at once and
// Err returns an error matching context.Canceled. It is safe to call more
// than once.
func (w *Watcher) Close() {
	w.stop(fmt.Errorf("watch %q: %w", w.prefix, context.Canceled))
}

// stop ends the watch for err, and its delivery at once.
func (w *Watcher) stop(err error) {
	w.stopOnce.Do(func() {
		w.s.mu.Lock()
		w.s.endWatch(w.w, err)
		stopCancel := w.stopCancel
		w.s.mu.Unlock()
		w.box.stop()
		if stopCancel != nil {
			stopCancel()
		}
	})
}

// The Watcher is its watch's sink.

func (w *Watcher) event(ev Event) error {
	if !w.box.put(ev) {
		return fmt.Errorf("watch %q: %w: %d events not taken from Events", w.prefix, ErrSlowConsumer, maxWatchBacklog)
	}
	return nil
}

func (w *Watcher) restarted(first bool) error {
	if first {
		return nil
	}
	return w.event(Event{Type: EventGap, At: w.s.clk.Now()})
}

func (w *Watcher) end(err error) {
	w.err = err
	w.box.end(err)
}

// --- the session's watches ---

// watcher is one watch as the session keeps it across connections. Every
// connection gets a WATCH of its own (a resume sends a new one and
// cancels the old); the events of one WATCH at a time are delivered: the
// old one's until the new one is confirmed, the new one's after.
type watcher struct {
	prefix  string
	sink    watchSink
	cur     uint64 // the WATCH whose events are delivered; 0 until one is confirmed
	pending uint64 // the WATCH sent last and not yet confirmed; 0: none
	started chan error
	told    bool // started has its value
	ended   bool
}

// watchSink receives a watch's life, with s.mu held, in the order of the
// session's frames. An error from event or restarted ends the watch.
type watchSink interface {
	event(ev Event) error
	// restarted: a WATCH was confirmed, the watch's first or one after a
	// reconnection (then events may be missing before it).
	restarted(first bool) error
	// end: the watch ended for err; nothing follows.
	end(err error)
}

// startWatch starts a watch of prefix for sink: its WATCH goes out now, or
// with the resume when no connection is attached. Called with s.mu held.
func (s *Session) startWatch(prefix string, sink watchSink) *watcher {
	w := &watcher{prefix: prefix, sink: sink, started: make(chan error, 1)}
	s.watchers[w] = true
	if s.conn != nil {
		w.pending = s.sendOnce(frameWatch, w.fields())
		s.watchIDs[w.pending] = w
	}
	return w
}

func (w *watcher) fields() []field {
	if w.prefix == "" {
		return nil
	}
	return []field{strField(tagKey, w.prefix)}
}

// tell gives started its value, once.
func (w *watcher) tell(err error) {
	if !w.told {
		w.told = true
		w.started <- err
	}
}

// endWatch ends w for err: the server is told (now, or by the next
// resume), and the sink hears of it. Called with s.mu held.
func (s *Session) endWatch(w *watcher, err error) {
	if w.ended {
		return
	}
	w.ended = true
	delete(s.watchers, w)
	if s.err == nil {
		for _, id := range []uint64{w.cur, w.pending} {
			if id != 0 && s.watchIDs[id] == w {
				s.cancelWatch(id)
			}
		}
	}
	w.cur, w.pending = 0, 0
	w.tell(err)
	w.sink.end(err)
}

// cancelWatch sends a CANCEL of the WATCH id; id is forgotten once the
// server answers it. Without a connection the next resume sends it.
// Called with s.mu held.
func (s *Session) cancelWatch(id uint64) {
	if s.conn != nil {
		s.unwatch[s.sendOnce(frameCancel, []field{u64Field(tagTarget, id)})] = id
	}
}

// rewatch appends to out, the frames of a resume, a new WATCH for every
// watch that goes on, then a CANCEL of every WATCH sent before. Called
// with s.mu held.
func (s *Session) rewatch(out []byte) []byte {
	old := make([]uint64, 0, len(s.watchIDs))
	for id := range s.watchIDs {
		old = append(old, id)
	}
	slices.Sort(old)
	clear(s.unwatch) // the CANCELs of the old connection are sent again
	for w := range s.watchers {
		s.nextID++
		w.pending = s.nextID
		s.watchIDs[w.pending] = w
		out = appendFrame(out, frame{typ: frameWatch, id: w.pending, fields: w.fields()})
	}
	for _, id := range old {
		s.nextID++
		s.unwatch[s.nextID] = id
		out = appendFrame(out, frame{typ: frameCancel, id: s.nextID, fields: []field{u64Field(tagTarget, id)}})
	}
	return out
}

// watchAnswer applies f if it answers a WATCH, or a CANCEL of one, and
// reports whether it did. Called with s.mu held.
func (s *Session) watchAnswer(f *frame) bool {
	if id, ok := s.unwatch[f.id]; ok {
		delete(s.unwatch, f.id)
		delete(s.watchIDs, id) // no event of it comes after this answer
		return true
	}
	w := s.watchIDs[f.id]
	if w == nil {
		return false
	}
	switch {
	case f.typ == frameRefused:
		delete(s.watchIDs, f.id) // the server holds no watch for it
		if !w.ended && (f.id == w.cur || f.id == w.pending) {
			code, _ := f.uint(tagCode)
			msg, _ := f.get(tagMessage)
			s.endWatch(w, refusal("watch", w.prefix, code, string(msg)))
		}
	case f.id == w.pending && !w.ended:
		first := w.cur == 0
		w.cur, w.pending = f.id, 0
		w.tell(nil)
		if err := w.sink.restarted(first); err != nil {
			s.endWatch(w, err)
		}
	}
	// An OK of a WATCH that a later one replaced: its CANCEL is on its way.
	return true
}

// watchEvent delivers an EVENT of the WATCH whose events the watch takes
// now; the others are copies, or late. Called with s.mu held.
func (s *Session) watchEvent(f *frame) {
	w := s.watchIDs[f.id]
	if w == nil || w.ended || f.id != w.cur {
		return
	}
	if err := w.sink.event(parseEvent(f)); err != nil {
		s.endWatch(w, err)
	}
}

func parseEvent(f *frame) Event {
	typ, _ := f.uint(tagEvent)
	key, _ := f.get(tagKey)
	token, _ := f.uint(tagToken)
	session, _ := f.uint(tagSession)
	name, _ := f.get(tagName)
	at, _ := f.uint(tagAt)
	note, _ := f.get(tagNote)
	return Event{Type: EventType(typ), Key: string(key), Token: token, Session: session, Name: string(name),
		At: time.UnixMilli(int64(at)), Note: string(note)}
}

// --- delivery ---

// outbox hands values to a consumer's channel in order without ever
// making the sender wait: they queue here, up to limit, and a goroutine of
// the outbox's own passes them on. After finish the channel closes once
// the queue is empty; after stop, at once.
type outbox[T any] struct {
	ch    chan T
	limit int

	mu   sync.Mutex
	q    []T
	done bool

	wake     chan struct{} // capacity 1
	quit     chan struct{}
	quitOnce sync.Once
}

func newOutbox[T any](limit int) *outbox[T] {
	o := &outbox[T]{ch: make(chan T), limit: limit, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	go o.run()
	return o
}

// put queues v and reports whether there was room.
func (o *outbox[T]) put(v T) bool {
	o.mu.Lock()
	if o.done || len(o.q) >= o.limit {
		o.mu.Unlock()
		return false
	}
	o.q = append(o.q, v)
	o.mu.Unlock()
	o.poke()
	return true
}

// finish closes the channel once what is queued has been taken.
func (o *outbox[T]) finish() {
	o.mu.Lock()
	o.done = true
	o.mu.Unlock()
	o.poke()
}

// stop closes the channel at once; what is queued is dropped.
func (o *outbox[T]) stop() { o.quitOnce.Do(func() { close(o.quit) }) }

// end finishes the outbox at the end of its watch for err: at once when
// Session.Close ended it (a program that closes its session takes no more
// values), else once what is queued has been taken.
func (o *outbox[T]) end(err error) {
	if errors.Is(err, ErrSessionClosed) {
		o.stop()
		return
	}
	o.finish()
}

func (o *outbox[T]) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *outbox[T]) run() {
	defer close(o.ch)
	for {
		o.mu.Lock()
		if len(o.q) == 0 {
			o.q = nil
			done := o.done
			o.mu.Unlock()
			if done {
				return
			}
			select {
			case <-o.wake:
				continue
			case <-o.quit:
				return
			}
		}
		v := o.q[0]
		var zero T
		o.q[0] = zero
		o.q = o.q[1:]
		o.mu.Unlock()
		select {
		case o.ch <- v:
		case <-o.quit:
			return
		}
	}
}
