package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/locking-center/locking-center/internal/bench/frame"
	"github.com/locking-center/locking-center/session"
)

// frameLocker is a session of lcd's session protocol written from
// docs/protocol.md alone, as the single node's benchmark drives lcd
// (internal/bench, session-throughput) and as the raft floor's client
// sends its byte: one connection, one request in flight, an ACQUIRE that
// waits and a RELEASE by its token, nothing else. Beside the Go client
// (clients/go), whose reader and keepalive goroutines cost CPU on the
// machine the servers share, it measures what the servers do.
type frameLocker struct {
	c                net.Conn
	r                *frame.Reader
	id, token        uint64
	acquire, release []byte
}

// errNotGranted is a refusal of an ACQUIRE or RELEASE (a GOODBYE
// not_leader, say): the client connects to the leader again.
var errNotGranted = errors.New("lcd: refused")

// dialFrames opens a session on addr for key.
func dialFrames(addr, key string) (*frameLocker, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	l := &frameLocker{c: c, r: frame.NewReader(c, 512), id: 1,
		acquire: frame.Append(nil, session.TypeAcquire, 0, frame.Str(session.TagKey, key)),
		release: frame.Append(nil, session.TypeRelease, 0, frame.Str(session.TagKey, key), frame.U64(session.TagToken, 0))}
	if _, err := c.Write(frame.Append([]byte(session.Preface), session.TypeHello, l.id, frame.Str(session.TagName, key))); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := l.expect(session.TypeWelcome); err != nil {
		c.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	return l, nil
}

// expect reads the answer to request l.id, which must be of type t.
func (l *frameLocker) expect(t session.Type) (*session.Frame, error) {
	f, err := l.r.Next()
	if err != nil {
		return nil, err
	}
	if f.Type != t || f.ID != l.id {
		return nil, fmt.Errorf("%w: frame %#02x id %d, want %#02x id %d", errNotGranted, uint8(f.Type), f.ID, uint8(t), l.id)
	}
	return f, nil
}

func (l *frameLocker) lock(context.Context) error {
	l.id++
	frame.SetID(l.acquire, l.id)
	if _, err := l.c.Write(l.acquire); err != nil {
		return err
	}
	f, err := l.expect(session.TypeGranted)
	if err != nil {
		return err
	}
	l.token = frame.Uint(f, session.TagToken)
	return nil
}

func (l *frameLocker) unlock(context.Context) error {
	l.id++
	frame.SetID(l.release, l.id)
	binary.BigEndian.PutUint64(l.release[len(l.release)-8:], l.token)
	if _, err := l.c.Write(l.release); err != nil {
		return err
	}
	_, err := l.expect(session.TypeOK)
	return err
}

func (l *frameLocker) close() {
	l.id++
	l.c.Write(frame.Append(nil, session.TypeClose, l.id))
	l.c.Close()
}

// lcdFrameSystem is lc driven by frameLockers.
func lcdFrameSystem(lc *lcdCluster) system {
	sys := lcdSystem(lc)
	sys.name += " (frames)"
	sys.client = func(key string) locker {
		return dialLeader(lc, func(addr string) (locker, error) { return dialFrames(addr, key) })
	}
	return sys
}
