package session

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/auth"
	"github.com/locking-center/locking-center/mutex"
)

// item is one frame owed to a session's client: an output of the node
// (a command's result or an event), or a frame already encoded.
type item struct {
	out     mutex.Output
	raw     []byte
	pending mutex.Pending // raw: written once durable
}

func (it *item) durable() mutex.Pending {
	if it.raw != nil {
		return it.pending
	}
	return it.out.Pending
}

// sess is one session as the server keeps it: the mutex.Route the node
// delivers to, and the frames owed to the client, in order. It outlives
// its connections: while none is attached, frames wait for the resume.
type sess struct {
	srv       *Server
	id        uint64
	name      string
	live      atomic.Pointer[mutex.Live]
	principal *auth.Principal // nil without authentication
	account   string          // charged for its locks, and rate-limited

	// batch: the reader is handling a batch of frames, and flushes at its
	// end (endBatch clears it under mu). Flush does nothing meanwhile.
	batch atomic.Bool

	mu       sync.Mutex
	conn     *conn         // attached connection, nil while none is
	items    []item        // owed, in order
	waiting  bool          // a goroutine waits for a Pending of the first item
	flushing bool          // a goroutine is in Flush: others leave their items to it
	again    bool          // items came while it flushed: it goes round once more
	closing  bool          // close the connection once everything is written
	written  chan struct{} // closed when a flush ends, for awaitWritten; nil when nobody waits
	taken    uint64        // items a flush has taken from items, ever
	handed   uint64        // of them, those whose bytes the connection has been given
}

// attached returns the connection attached to s, nil when none is.
func (s *sess) attached() *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

// Deliver queues o. It is called with the node's lock held. The result
// of an acquire that parked is dropped: no frame answers it (its grant
// comes later, as an event), and an item is large.
func (s *sess) Deliver(o mutex.Output) {
	if !o.IsEvent && o.Command.Op == mutex.OpAcquire && o.Result.Status == mutex.StatusParked {
		return
	}
	s.mu.Lock()
	s.items = append(s.items, item{})
	s.items[len(s.items)-1].out = o
	s.mu.Unlock()
}

// queue adds it to what is owed.
func (s *sess) queue(it item) {
	s.mu.Lock()
	s.items = append(s.items, it)
	s.mu.Unlock()
}

// queueBounded adds it unless the session already owes limit frames
// (queued here, or sent to its connection and not yet in the socket), and
// reports whether it did.
func (s *sess) queueBounded(it item, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	owed := len(s.items)
	if s.conn != nil {
		owed += s.conn.backlog()
	}
	if owed >= limit {
		return false
	}
	s.items = append(s.items, it)
	return true
}

// queueFor adds raw to what is owed when c is the session's connection,
// and reports whether it did.
func (s *sess) queueFor(c *conn, raw []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c {
		return false
	}
	s.items = append(s.items, item{raw: raw})
	return true
}

// queueRaw adds a frame already encoded to what is owed. (Deliver and
// queueRaw fill the item in place: an item is large, and a copy of it on
// the stack of the connection's goroutine would grow that stack.)
func (s *sess) queueRaw(raw []byte) { s.queueRaws([][]byte{raw}) }

// queueRaws adds frames already encoded to what is owed, one after
// another: nothing queued meanwhile comes between them.
func (s *sess) queueRaws(raws [][]byte) {
	s.mu.Lock()
	for _, raw := range raws {
		s.items = append(s.items, item{})
		s.items[len(s.items)-1].raw = raw
	}
	s.mu.Unlock()
}

// shed lets go of the room of an empty queue, when the connection goes
// idle: a queue keeps its room while it is busy, and an item is large.
func (s *sess) shed() {
	s.mu.Lock()
	if len(s.items) == 0 {
		s.items = nil
	}
	s.mu.Unlock()
}

// sendFirst writes b, frames whole frames, to c when c is the session's
// connection and everything owed has been handed to it already: nothing
// is queued (or waits for the log) and no Flush is under way. It reports
// whether it wrote. While it writes it is the session's flusher, so that
// what is queued meanwhile (the GOODBYE of the session's expiry, say)
// leaves after b, never before it.
func (s *sess) sendFirst(c *conn, b []byte, frames int) bool {
	s.mu.Lock()
	if len(s.items) > 0 || s.flushing || s.conn != c {
		s.mu.Unlock()
		return false
	}
	s.flushing, s.again = true, false
	s.mu.Unlock()
	if h := sendFirstHook.Load(); h != nil {
		(*h)(s)
	}
	c.sendFrames(b, frames)
	s.mu.Lock()
	s.flushRest()
	return true
}

// sendFirstHook, when set (tests), runs in sendFirst just before it writes.
var sendFirstHook atomic.Pointer[func(*sess)]

// beginBatch holds writes back while the reader handles the frames of one
// read, so that their answers leave in one write.
func (s *sess) beginBatch() { s.batch.Store(true) }

// endBatch ends the batch and writes what it owes.
func (s *sess) endBatch() {
	s.mu.Lock()
	s.batch.Store(false)
	s.flushLocked()
}

// closeAfterFlush closes the connection once what is owed is written.
func (s *sess) closeAfterFlush() {
	s.mu.Lock()
	s.closing = true
	s.flushLocked()
}

// flushBufs holds the buffers Flush encodes into, so that a flush
// allocates none; one returns to the pool once its bytes are written or
// copied. A buffer that grew over maxPooled is left to the collector.
var flushBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooled = 16 << 10

// Flush writes what is owed, in order, to the attached connection: every
// item whose change is durable. The first that is not yet durable, and
// all after it, wait; a goroutine waits for it and flushes again. A grant
// that could not be made durable is answered not_durable instead and
// revoked. Flush never blocks: the connection takes what it can at once
// and a goroutine writes the rest.
//
// One goroutine flushes at a time: one that finds another flushing leaves
// its items to it, and the flusher goes round again before it stops. Two
// flushers could otherwise hand their bytes to the connection in the other
// order than they took them from the queue.
func (s *sess) Flush() {
	if s.batch.Load() {
		// The reader flushes at the end of its batch (endBatch), after
		// what is queued now: nothing to do here, and no lock to take
		// for each command the batch applies. A flusher that misses the
		// end of the batch finds the flag cleared (endBatch clears it
		// under the lock, then flushes what was queued before).
		return
	}
	s.mu.Lock()
	s.flushLocked()
}

// flushLocked is Flush, called with s.mu held; it releases it.
func (s *sess) flushLocked() {
	if s.flushing {
		s.again = true
		s.mu.Unlock()
		return
	}
	s.flushing, s.again = true, true
	s.flushRest()
}

// flushRest is the flusher's loop: while another asked for a flush since
// the last pass (again), it passes once more. It is called by the flusher
// with s.mu held, and releases it.
func (s *sess) flushRest() {
	for s.again {
		s.again = false
		n := s.flushOnce() // unlocks s.mu
		s.mu.Lock()
		s.handed += n
	}
	s.flushing = false
	if s.written != nil {
		close(s.written)
		s.written = nil
	}
	s.mu.Unlock()
}

// awaitWritten waits until c has been given the bytes of everything the
// session owed when it was called, the journal waited for where it must
// be; or until c is no longer the session's connection, or for at most
// the header timeout (a flush that cannot come: the server stopping). A
// connection's end calls it before the connection closes, so that the
// answers of the requests it read reach their client ahead of its end
// (docs/protocol.md, "Answers come before the end of their connection"):
// the reader of a CLOSE, of a frame it refuses, of the end of its
// client's writes, and a resume before it takes the session from c.
func (s *sess) awaitWritten(c *conn) {
	s.mu.Lock()
	target := s.taken + uint64(len(s.items))
	var timeout <-chan time.Time
	for s.conn == c && s.handed < target {
		if s.written == nil {
			s.written = make(chan struct{})
		}
		ch := s.written
		s.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(s.srv.cfg.HeaderTimeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ch:
		case <-timeout:
			return
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
}

// flushOnce writes what is owed and ready, as Flush says, and returns
// how many items it took. It is called with s.mu held and returns with it
// released.
func (s *sess) flushOnce() uint64 {
	var revoke []mutex.Command
	if s.batch.Load() || s.waiting || s.conn == nil {
		s.mu.Unlock()
		return 0
	}
	c := s.conn
	bp := flushBufs.Get().(*[]byte)
	buf := (*bp)[:0]
	ready := 0
	for ready < len(s.items) && mutex.Ready(s.items[ready].durable()) {
		ready++
	}
	end := false
	frames := 0
	pushed := false // an event: a grant, a withdrawal, a loss
	for i := range s.items[:ready] {
		pushed = pushed || s.items[i].raw == nil && s.items[i].out.IsEvent
		var r *mutex.Command
		n := len(buf)
		buf, r, end = s.encode(buf, &s.items[i])
		if len(buf) > n {
			frames++
		}
		if r != nil {
			revoke = append(revoke, *r)
		}
		if end {
			ready = len(s.items)
			break
		}
	}
	n := copy(s.items, s.items[ready:])
	clear(s.items[n:])
	s.items = s.items[:n]
	s.taken += uint64(ready)
	if len(s.items) > 0 && !end {
		s.waiting = true
		p := s.items[0].durable()
		if !s.srv.group.Go(func() {
			p.Wait()
			s.mu.Lock()
			s.waiting = false
			s.mu.Unlock()
			s.Flush()
		}) {
			s.waiting = false
		}
	}
	closing := s.closing && len(s.items) == 0 || end
	s.mu.Unlock()
	c.write(buf, frames, pushed) // copies what it does not write at once
	if cap(buf) <= maxPooled {
		*bp = buf[:0]
		flushBufs.Put(bp)
	}
	if closing {
		c.close()
	}
	for i := range revoke {
		s.srv.node.Apply(revoke[i])
	}
	return uint64(ready)
}

// encode appends the frame of it to b. It returns a revoke to apply for a
// grant that could not be made durable, and whether the frame ends the
// connection.
func (s *sess) encode(b []byte, it *item) ([]byte, *mutex.Command, bool) {
	if it.raw != nil {
		return append(b, it.raw...), nil, false
	}
	o := &it.out
	failed := o.Pending != nil && o.Pending.Wait() != nil
	if o.IsEvent {
		return s.encodeEvent(b, &o.Event, failed)
	}
	c, r := &o.Command, &o.Result
	id := c.Request
	switch c.Op {
	case mutex.OpAcquire:
		switch r.Status {
		case mutex.StatusGranted:
			if failed {
				return refused(b, id, CodeNotDurable, "the grant could not be written to the log"),
					&mutex.Command{Op: mutex.OpRevoke, Key: c.Key, Token: r.Token}, false
			}
			return granted(b, id, c.Key, r.Token, r.Count, r.Left), nil, false
		case mutex.StatusParked:
			return b, nil, false
		case mutex.StatusLimitMismatch:
			return refused(b, id, CodeLimitMismatch, fmt.Sprintf("the key is a semaphore of limit %d", r.Limit)), nil, false
		}
	case mutex.OpRelease, mutex.OpCancel, mutex.OpCloseSession:
		if r.Status == mutex.StatusOK || r.Status == mutex.StatusNotParked {
			return okFrame(b, id), nil, false
		}
	case mutex.OpRenew:
		if r.Status == mutex.StatusOK {
			fb := begin(b, TypeOK, id)
			if r.Left > 0 {
				fb.u32(TagLeft, millis(int64(r.Left)))
			}
			return fb.end(), nil, false
		}
	}
	code, msg := statusCode(r.Status)
	return refused(b, id, code, msg), nil, false
}

// encodeEvent appends the frame of ev; failed tells that the command that
// made it could not be made durable.
func (s *sess) encodeEvent(b []byte, ev *mutex.Event, failed bool) ([]byte, *mutex.Command, bool) {
	switch ev.Kind {
	case mutex.EventGranted:
		if failed {
			return refused(b, ev.Request, CodeNotDurable, "the grant could not be written to the log"),
				&mutex.Command{Op: mutex.OpRevoke, Key: ev.Key, Token: ev.Token}, false
		}
		return granted(b, ev.Request, ev.Key, ev.Token, 1, ev.Lease), nil, false
	case mutex.EventWithdrawn:
		code, msg := reasonCode(ev.Reason)
		return refused(b, ev.Request, code, msg), nil, false
	case mutex.EventLost:
		if ev.Reason == mutex.ReasonLapsed {
			return b, nil, false // the RELEASE that gave it up is answered OK
		}
		code, _ := reasonCode(ev.Reason)
		fb := begin(b, TypeLost, ev.Request)
		fb.str(TagKey, ev.Key)
		fb.u64(TagToken, ev.Token)
		fb.u8(TagCode, uint8(code))
		return fb.end(), nil, false
	case mutex.EventSessionEnded:
		s.srv.watch.dropSession(s)
		if ev.Reason == mutex.ReasonSessionExpired {
			return append(b, goodbye(CodeSessionExpired, "the session's TTL passed without a frame")...), nil, true
		}
	}
	return b, nil, false
}

// granted appends a GRANTED frame.
func granted(b []byte, id uint64, key string, token uint64, count uint32, lease time.Duration) []byte {
	fb := begin(b, TypeGranted, id)
	fb.str(TagKey, key)
	fb.u64(TagToken, token)
	fb.u32(TagCount, max(count, 1))
	if lease > 0 {
		fb.u32(TagLeft, millis(int64(lease)))
	}
	return fb.end()
}

// statusCode maps a refusal of the table to its code and message.
func statusCode(st mutex.Status) (Code, string) {
	switch st {
	case mutex.StatusBusy:
		return CodeBusy, "the key is held, or in its lock-delay"
	case mutex.StatusStale:
		return CodeStaleToken, "no lock of this session with that token holds the key"
	case mutex.StatusDuplicate:
		return CodeDuplicate, "the request id is not above the highest applied for the session"
	case mutex.StatusNoSession:
		return CodeSessionEnded, "the session has ended"
	case mutex.StatusDeadlock:
		return CodeDeadlock, "waiting would close a cycle of waits"
	case mutex.StatusUpgrade:
		return CodeUpgrade, "a shared holder cannot take the key exclusively"
	case mutex.StatusLimitMismatch:
		return CodeLimitMismatch, "the limit is not the key's"
	case mutex.StatusOverLimit:
		return CodeOverLimit, "the source holds or has parked as many as it may"
	}
	return CodeBadRequest, "the request is out of range: " + st.String()
}

// reasonCode maps why a request was withdrawn or a lock lost to its code
// and message.
func reasonCode(r mutex.Reason) (Code, string) {
	switch r {
	case mutex.ReasonTimeout:
		return CodeTimeout, "the wait ran out"
	case mutex.ReasonCancelled:
		return CodeCancelled, "cancelled"
	case mutex.ReasonReset:
		return CodeReset, "taken by a reset"
	case mutex.ReasonSessionExpired:
		return CodeSessionExpired, "the session expired"
	case mutex.ReasonLeaseExpired:
		return CodeLeaseExpired, "the lock's lease ran out"
	case mutex.ReasonRevoked:
		return CodeNotDurable, "the grant was revoked"
	}
	return CodeSessionEnded, "the session ended"
}

var _ mutex.Route = (*sess)(nil)
