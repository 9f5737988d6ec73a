package main

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"

	"github.com/locking-center/locking-center/internal/bench/frame"
	"github.com/locking-center/locking-center/session"
)

// counter numbers sessions and tokens.
var counter atomic.Uint64

// Fields of the answers that never change: lcd's default TTL and
// keepalive, a secret of lcd's size.
var (
	welcomeTTL       = frame.U32(session.TagTTL, 10_000)
	welcomeKeepalive = frame.U32(session.TagKeepalive, 3_333)
	welcomeSecret    = session.Field{Tag: session.TagSecret, Value: make([]byte, session.SecretLen)}
	welcomeServer    = frame.Str(session.TagServer, "floor")
	countOne         = frame.U32(session.TagCount, 1)
)

// queued, with -queue: the floor of a contended key. Each key has a
// holder or not and a FIFO queue of the ACQUIREs waiting for it; a
// RELEASE grants the next at once, written to the waiter's connection by
// the releaser's goroutine before the RELEASE's own OK, as lcd writes it.
// There are no sessions, owners or tokens to check.
var (
	queued bool
	qmu    sync.Mutex
	held   = map[string]bool{}
	queues = map[string][]waiter{}
)

// waiter is an ACQUIRE waiting in a queue.
type waiter struct {
	c  *floorConn
	id uint64
}

// floorConn is a connection whose writes other connections' goroutines
// make too (grants, with -queue).
type floorConn struct {
	net.Conn
	mu sync.Mutex
}

func (c *floorConn) write(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.Write(b)
	return err
}

// serveSession reads the preface, then answers frames until the
// connection ends or a frame does not parse. It writes once it has
// answered every whole frame read so far.
func serveSession(nc net.Conn) {
	c := &floorConn{Conn: nc}
	defer c.Close()
	r := frame.NewReader(c, 512)
	preface := make([]byte, len(session.Preface))
	if r.ReadFull(preface) != nil {
		return
	}
	if string(preface) != session.Preface {
		c.Write([]byte{'-'})
		return
	}
	var out []byte
	for {
		f, err := r.Next()
		if err != nil {
			return
		}
		var closing bool
		if queued {
			out, closing = answerQueued(c, out, f)
		} else {
			out, closing = answer(out, f)
		}
		if closing || !r.Ready() {
			if err := c.write(out); err != nil || closing {
				return
			}
			out = out[:0]
		}
	}
}

// answer appends the answer to f and reports whether the connection ends
// after it.
func answer(out []byte, f *session.Frame) ([]byte, bool) {
	var id, token [8]byte
	switch f.Type {
	case session.TypeHello, session.TypeResume:
		binary.BigEndian.PutUint64(id[:], counter.Add(1))
		return frame.Append(out, session.TypeWelcome, f.ID, session.Field{Tag: session.TagSession, Value: id[:]},
			welcomeSecret, welcomeTTL, welcomeKeepalive, welcomeServer), false
	case session.TypeAcquire:
		key, _ := f.Get(session.TagKey)
		binary.BigEndian.PutUint64(token[:], counter.Add(1))
		return frame.Append(out, session.TypeGranted, f.ID, session.Field{Tag: session.TagKey, Value: key},
			session.Field{Tag: session.TagToken, Value: token[:]}, countOne), false
	}
	return frame.Append(out, session.TypeOK, f.ID), f.Type == session.TypeClose
}

// answerQueued is answer with -queue: an ACQUIRE of a held key waits in
// its queue (no answer now), a RELEASE grants the next waiter, and
// DESCRIBE tells the queue's length.
func answerQueued(c *floorConn, out []byte, f *session.Frame) ([]byte, bool) {
	key, _ := f.Get(session.TagKey)
	switch f.Type {
	case session.TypeAcquire:
		qmu.Lock()
		defer qmu.Unlock()
		if held[string(key)] {
			queues[string(key)] = append(queues[string(key)], waiter{c: c, id: f.ID})
			return out, false
		}
		held[string(key)] = true
		return answer(out, f)
	case session.TypeRelease:
		qmu.Lock()
		q := queues[string(key)]
		if len(q) == 0 {
			delete(held, string(key))
			qmu.Unlock()
			return frame.Append(out, session.TypeOK, f.ID), false
		}
		next := q[0]
		queues[string(key)] = q[1:]
		granted, _ := answer(nil, &session.Frame{Type: session.TypeAcquire, ID: next.id,
			Fields: []session.Field{{Tag: session.TagKey, Value: key}}})
		next.c.write(granted)
		qmu.Unlock()
		return frame.Append(out, session.TypeOK, f.ID), false
	case session.TypeDescribe:
		qmu.Lock()
		n := len(queues[string(key)])
		qmu.Unlock()
		return frame.Append(out, session.TypeInfo, f.ID, frame.U32(session.TagQueue, uint32(n))), false
	}
	return answer(out, f)
}
