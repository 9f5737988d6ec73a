package httpapi_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
	"github.com/locking-center/locking-center/session"
)

// The other front ends, for tests of the one queue they share with HTTP:
// the mutex port (v1 and the session protocol) on 127.0.0.1.

type mutexPort struct {
	node *mutex.Node
	addr string
}

func startMutexPort(t *testing.T) *mutexPort {
	t.Helper()
	node := mutex.NewNode(mutex.NodeConfig{})
	ss, err := session.NewServer(node, session.Config{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	v1, err := oneshot.NewServer(node, oneshot.ServerConfig{Logger: testLogger(t),
		Handoff: &oneshot.Handoff{First: session.Preface[0], Serve: ss.Serve}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- v1.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		ss.Close()
		v1.Close()
		<-done
		node.Close()
	})
	return &mutexPort{node: node, addr: ln.Addr().String()}
}

// v1Lock is a v1 lock on its way: granted is closed once it is held.
type v1Lock struct {
	c       *lockingcenter.Client
	key     string
	granted chan struct{}
}

func (m *mutexPort) v1Lock(t *testing.T, key, source string) *v1Lock {
	l := &v1Lock{c: lockingcenter.New(m.addr, lockingcenter.WithSource(source)), key: key, granted: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		err := l.c.Lock(context.Background(), key)
		errc <- err
		if err == nil {
			close(l.granted)
		}
	}()
	t.Cleanup(func() {
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("v1 lock: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("v1 lock never answered")
		}
	})
	return l
}

func (l *v1Lock) unlock(t *testing.T) {
	t.Helper()
	if err := l.c.Unlock(context.Background(), l.key); err != nil {
		t.Fatal(err)
	}
}

// sessionConn is a raw client of the session protocol.
type sessionConn struct {
	t  *testing.T
	c  net.Conn
	id uint64
}

func (m *mutexPort) session(t *testing.T, name string) *sessionConn {
	t.Helper()
	c, err := net.Dial("tcp", m.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &sessionConn{t: t, c: c}
	if _, err := c.Write([]byte(session.Preface)); err != nil {
		t.Fatal(err)
	}
	s.send(session.TypeHello, field(session.TagName, []byte(name)))
	if f := s.read(); f.Type != session.TypeWelcome {
		t.Fatalf("HELLO answered %#x", f.Type)
	}
	return s
}

func field(tag session.Tag, v []byte) []byte {
	b := []byte{byte(tag), 0, 0}
	binary.BigEndian.PutUint16(b[1:], uint16(len(v)))
	return append(b, v...)
}

func (s *sessionConn) send(typ session.Type, fields ...[]byte) uint64 {
	s.t.Helper()
	s.id++
	body := []byte{byte(typ)}
	body = binary.BigEndian.AppendUint64(body, s.id)
	for _, f := range fields {
		body = append(body, f...)
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	if _, err := s.c.Write(append(frame, body...)); err != nil {
		s.t.Fatal(err)
	}
	return s.id
}

func (s *sessionConn) read() session.Frame {
	s.t.Helper()
	s.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var n [4]byte
	if _, err := io.ReadFull(s.c, n[:]); err != nil {
		s.t.Fatal(err)
	}
	b := make([]byte, 4+binary.BigEndian.Uint32(n[:]))
	copy(b, n[:])
	if _, err := io.ReadFull(s.c, b[4:]); err != nil {
		s.t.Fatal(err)
	}
	var f session.Frame
	if _, err := session.ParseFrame(b, &f); err != nil {
		s.t.Fatal(err)
	}
	return f
}

// acquire sends an ACQUIRE that waits for ever and returns its id.
func (s *sessionConn) acquire(key string) uint64 {
	return s.send(session.TypeAcquire, field(session.TagKey, []byte(key)))
}

// granted reads frames until the GRANTED of request id and returns its
// token.
func (s *sessionConn) granted(t *testing.T, id uint64) uint64 {
	t.Helper()
	for {
		f := s.read()
		if f.ID != id {
			continue
		}
		if f.Type != session.TypeGranted {
			t.Fatalf("acquire %d answered %#x", id, f.Type)
		}
		tok, _ := f.Uint(session.TagToken)
		return tok
	}
}

func (s *sessionConn) release(t *testing.T, key string, token uint64) {
	t.Helper()
	id := s.send(session.TypeRelease, field(session.TagKey, []byte(key)),
		field(session.TagToken, binary.BigEndian.AppendUint64(nil, token)))
	for {
		if f := s.read(); f.ID == id {
			if f.Type != session.TypeOK {
				t.Fatalf("release answered %#x", f.Type)
			}
			return
		}
	}
}

func jsonDecode(resp *http.Response, v any) error {
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	return dec.Decode(v)
}

func httptestRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func mustRequest(t *testing.T, method, path string) *http.Request {
	t.Helper()
	return httptest.NewRequest(method, path, nil)
}
