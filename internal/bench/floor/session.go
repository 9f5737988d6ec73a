package main

import (
	"encoding/binary"
	"net"
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

// serveSession reads the preface, then answers frames until the
// connection ends or a frame does not parse. It writes once it has
// answered every whole frame read so far.
func serveSession(c net.Conn) {
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
		out, closing = answer(out, f)
		if closing || !r.Ready() {
			if _, err := c.Write(out); err != nil || closing {
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
