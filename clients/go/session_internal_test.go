package lockingcenter

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// scriptedServer serves each connection to a 127.0.0.1 port with
// script(n, conn), n counting connections from 1, and stops at the
// test's end.
func scriptedServer(t *testing.T, script func(n int, c net.Conn, fr *frameReader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(30 * time.Second))
			var p [len(preface)]byte
			if _, err := io.ReadFull(c, p[:]); err == nil && string(p[:]) == preface {
				script(n, c, &frameReader{r: c})
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

var testSecret = bytes.Repeat([]byte{0xa5}, secretLen)

// welcomeHello reads a HELLO and answers WELCOME of session 7.
func welcomeHello(t *testing.T, c net.Conn, fr *frameReader) bool {
	f, err := fr.next()
	if err != nil || f.typ != frameHello {
		t.Errorf("first frame %v, %v; want HELLO", f, err)
		return false
	}
	c.Write(appendFrame(nil, frame{typ: frameWelcome, id: f.id, fields: []field{u64Field(tagSession, 7),
		{tagSecret, testSecret}, u32Field(tagTTL, 10_000), u32Field(tagKeepalive, 3333)}}))
	return true
}

func expectFrame(t *testing.T, fr *frameReader, typ byte) *frame {
	f, err := fr.next()
	if err != nil || f.typ != typ {
		t.Errorf("frame %v, %v; want type %#02x", f, err, typ)
		return nil
	}
	return f
}

func goodbyeFrame(code uint8) []byte {
	return appendFrame(nil, frame{typ: frameGoodbye, fields: []field{u8Field(tagCode, code), strField(tagMessage, "bye")}})
}

// GOODBYE protocol_error ends the session.
func TestSessionProtocolErrorGoodbye(t *testing.T) {
	addr := scriptedServer(t, func(n int, c net.Conn, fr *frameReader) {
		if welcomeHello(t, c, fr) && expectFrame(t, fr, frameAcquire) != nil {
			c.Write(goodbyeFrame(codeProtocolError))
		}
	})
	acquireEnds(t, addr, ErrProtocol)
}

// acquireEnds opens a session at addr and checks that an Acquire, and the
// session, end with want.
func acquireEnds(t *testing.T, addr string, want error) {
	t.Helper()
	s, err := NewSession(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Acquire(context.Background(), "k"); !errors.Is(err, want) {
		t.Fatalf("Acquire: %v, want %v", err, want)
	}
	<-s.Done()
	if !errors.Is(s.Err(), want) {
		t.Fatalf("session error %v, want %v", s.Err(), want)
	}
}

// A malformed frame from the server drops the connection; the session
// resumes with its id and secret, and ends when the server no longer
// knows it.
func TestSessionMalformedFrameResumes(t *testing.T) {
	resumed := make(chan frame, 1)
	addr := scriptedServer(t, func(n int, c net.Conn, fr *frameReader) {
		switch n {
		case 1:
			if welcomeHello(t, c, fr) && expectFrame(t, fr, frameAcquire) != nil {
				c.Write([]byte{0, 0, 0, 3, 1, 2, 3}) // a length under a frame header
			}
		case 2:
			f := expectFrame(t, fr, frameResume)
			if f == nil {
				return
			}
			r := frame{typ: f.typ, id: f.id, fields: append([]field(nil), f.fields...)}
			for i := range r.fields {
				r.fields[i].value = bytes.Clone(r.fields[i].value)
			}
			resumed <- r
			c.Write(goodbyeFrame(codeUnknownSession))
		}
	})
	acquireEnds(t, addr, ErrSessionExpired)
	r := <-resumed
	id, _ := r.uint(tagSession)
	secret, _ := r.get(tagSecret)
	if id != 7 || !bytes.Equal(secret, testSecret) || r.id <= 2 {
		t.Fatalf("RESUME id %d of session %d with secret %x", r.id, id, secret)
	}
}

// A server that does not know a field of the HELLO refuses it
// unsupported (docs/protocol.md); NewSession fails with ErrFailed and the
// server's words, not with a protocol error.
func TestSessionHelloRefused(t *testing.T) {
	addr := scriptedServer(t, func(n int, c net.Conn, fr *frameReader) {
		if f := expectFrame(t, fr, frameHello); f != nil {
			c.Write(appendFrame(nil, frame{typ: frameRefused, id: f.id,
				fields: []field{u8Field(tagCode, codeUnsupported), strField(tagMessage, "field 0x03 is not supported here")}}))
		}
	})
	_, err := NewSession(context.Background(), addr)
	if !errors.Is(err, ErrFailed) || errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "unsupported") {
		t.Fatalf("NewSession: %v, want ErrFailed naming unsupported", err)
	}
}

// A GOODBYE names its sentinel and code, and its message only when the
// message adds to them.
func TestGoodbyeErrorSaysItOnce(t *testing.T) {
	for _, tc := range []struct {
		err  *goodbyeError
		want string
	}{
		{&goodbyeError{code: codeUnauthenticated, message: "authentication failed"},
			"lockingcenter: authentication failed: the server said goodbye (unauthenticated)"},
		{&goodbyeError{code: codeNotLeader, message: "this node does not lead its cluster"},
			"lockingcenter: server refused the request: no node leads the cluster now: the server said goodbye (not_leader): this node does not lead its cluster"},
		{&goodbyeError{code: codeUnauthenticated}, "lockingcenter: authentication failed: the server said goodbye (unauthenticated)"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.err, got, tc.want)
		}
		if !errors.Is(tc.err, tc.err.Unwrap()) {
			t.Errorf("%+v does not match its sentinel", tc.err)
		}
	}
}
