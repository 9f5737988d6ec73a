package serve

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/testcerts"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return s.(*net.TCPConn), c.(*net.TCPConn)
}

// within fails t unless f returns within 30 s: f must not wait for a peer
// that does not read.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s waited for a peer that does not read", what)
	}
}

// pattern returns n bytes that show any loss or reordering.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7 / 5)
	}
	return b
}

// Writes to a queued connection return at once however much the peer has
// left unread; the peer gets every byte in order, then the end of stream
// CloseWrite asked for after them.
func TestQueuedWritesNeverWait(t *testing.T) {
	var g Group
	defer g.Wait()
	defer g.Close()
	sc, cc := tcpPair(t)
	q := newQueuedConn(sc, &g, time.Minute)
	want := pattern(8 << 20) // far above a socket's buffers
	within(t, "Write", func() {
		for off := 0; off < len(want); off += 64 << 10 {
			if n, err := q.Write(want[off : off+64<<10]); err != nil || n != 64<<10 {
				t.Errorf("Write = %d, %v", n, err)
				return
			}
		}
		if err := q.CloseWrite(); err != nil {
			t.Errorf("CloseWrite: %v", err)
		}
	})
	if _, err := q.Write([]byte{1}); err == nil {
		t.Error("a write after CloseWrite succeeded")
	}
	got, err := io.ReadAll(cc)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("peer read %d bytes (equal: %v), %v; want %d", len(got), bytes.Equal(got, want), err, len(want))
	}
}

// A peer that takes nothing within the timeout is cut, and later writes
// fail.
func TestQueuedWritesCutAStalledPeer(t *testing.T) {
	var g Group
	defer g.Wait()
	defer g.Close()
	sc, cc := tcpPair(t)
	q := newQueuedConn(sc, &g, 50*time.Millisecond)
	within(t, "Write", func() { q.Write(pattern(8 << 20)) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := q.Write([]byte{1}); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a peer that reads nothing was never cut")
		}
		time.Sleep(time.Millisecond)
	}
	cc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, cc); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the cut connection stayed open")
	}
}

// A server with TLS hands its opener the *tls.Conn before any handshake,
// in the accept loop, and tracks that connection: Finish closes it.
func TestServerTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "CA")
	srvCert := ca.Server(t)
	cfg := &tls.Config{Certificates: []tls.Certificate{srvCert.TLS}}
	opened := make(chan net.Conn, 1)
	s := NewServer(func(c net.Conn) (func() bool, bool) {
		tc, ok := c.(*tls.Conn)
		if !ok || tc.ConnectionState().HandshakeComplete {
			t.Errorf("opener got %T, handshake done: %v", c, ok && tc.ConnectionState().HandshakeComplete)
		}
		return func() bool {
			var b [1]byte
			if _, err := c.Read(b[:]); err != nil {
				t.Errorf("read after the handshake: %v", err)
				return false
			}
			c.Write([]byte{b[0] + 1})
			opened <- c
			return true
		}, false
	}, nil).UseTLS(cfg, time.Minute)
	ln := serveLoopback(t, s)
	c, err := tls.Dial("tcp", ln.Addr().String(), testcerts.ClientConfig(ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{'a'})
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'b' {
		t.Fatalf("answer %q, %v", b[0], err)
	}
	sc := <-opened
	if _, ok := Socket(sc).(*net.TCPConn); !ok {
		t.Fatalf("Socket of the server's connection is %T", Socket(sc))
	}
	if s.conns.Len() != 1 {
		t.Fatalf("%d connections tracked, want 1", s.conns.Len())
	}
	s.Finish(sc)
	if s.conns.Len() != 0 {
		t.Fatal("Finish left the TLS connection tracked")
	}
	if _, err := c.Read(b[:]); err != io.EOF {
		t.Fatalf("after Finish the client read %v, want the end of stream", err)
	}
}

// A connection over the gate's cap on a port under TLS is refused
// without a byte in the clear (its client expects a handshake), and the
// refusal is still reported.
func TestGateRefusalUnderTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "CA")
	cfg := &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}}
	g := NewGate(1, 0)
	refused := new(atomic.Int32)
	s := NewServer(Worker(func(c net.Conn) { io.Copy(io.Discard, c) }), nil).UseTLS(cfg, time.Minute)
	s.Limit(g, false, func(c net.Conn) {
		refused.Add(1)
		c.Write([]byte("no"))
	})
	ln := serveLoopback(t, s)
	held, err := tls.Dial("tcp", ln.Addr().String(), testcerts.ClientConfig(ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	waitOpen(t, g, 1)
	if got := refusedWith(t, dialT(t, ln.Addr().String())); got != "" || refused.Load() != 1 {
		t.Fatalf("a connection over the cap got %q, %d refused; want nothing, 1 refused", got, refused.Load())
	}
}
