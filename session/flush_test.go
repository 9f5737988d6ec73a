package session

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Frames leave in the order they were queued, even when several
// goroutines flush one session at once (a grant pushed by another
// session's release while the connection's own reader answers a PING).
func TestConcurrentFlushesKeepTheOrder(t *testing.T) {
	server, peer := tcpPair(t)
	srv := &Server{cfg: Config{}.withDefaults()}
	c := newConn(srv, server, nil)
	defer c.close()
	s := &sess{srv: srv, conn: c}

	const writers, each = 8, 2000
	var next uint64
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				s.mu.Lock()
				next++
				s.items = append(s.items, item{raw: okFrame(nil, next)})
				s.mu.Unlock()
				s.Flush()
			}
		})
	}
	r := &reader{c: peer}
	var f Frame
	for want := uint64(1); want <= writers*each; want++ {
		peer.SetReadDeadline(time.Now().Add(30 * time.Second))
		if err := r.next(&f); err != nil {
			t.Fatalf("frame %d: %v", want, err)
		}
		if f.ID != want {
			t.Fatalf("frame %d arrived as number %d", f.ID, want)
		}
	}
	wg.Wait()
}

// deadlines is a connection that records its write deadlines.
type deadlines struct {
	*net.TCPConn
	mu   sync.Mutex
	last time.Time
}

func (d *deadlines) SetWriteDeadline(t time.Time) error {
	d.mu.Lock()
	d.last = t
	d.mu.Unlock()
	return d.TCPConn.SetWriteDeadline(t)
}

// The goroutine that writes what the socket did not take leaves no write
// deadline behind: the writes that follow, without waiting, would fail
// once it passed and end the connection.
func TestDrainLeavesNoWriteDeadline(t *testing.T) {
	server, peer := tcpPair(t)
	srv := &Server{cfg: Config{}.withDefaults()}
	d := &deadlines{TCPConn: server.(*net.TCPConn)}
	c := newConn(srv, d, nil)
	defer c.close()

	big := bytes.Repeat(okFrame(nil, 1), 16<<20/(4+frameHeader)) // more than both sockets' buffers hold
	c.send(big)
	c.wmu.Lock()
	draining := c.drainer
	c.wmu.Unlock()
	if !draining {
		t.Fatal("the socket took 16 MiB at once; no drain to test")
	}
	peer.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(peer, big); err != nil {
		t.Fatal(err)
	}
	srv.group.Wait() // the drainer
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.last.IsZero() {
		t.Fatalf("write deadline %v left behind", d.last)
	}
}

// tcpPair returns both ends of a TCP connection over loopback, closed
// when the test ends.
func tcpPair(t *testing.T) (server, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed := make(chan net.Conn, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	peer = <-dialed
	t.Cleanup(func() { server.Close() })
	if peer == nil {
		t.FailNow() // the dial's error is logged
	}
	t.Cleanup(func() { peer.Close() })
	return server, peer
}
