package serve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("runtime.runCleanups"))
}

func TestGroupRefusesAfterClose(t *testing.T) {
	var g Group
	ran := make(chan struct{})
	if !g.Go(func() { close(ran) }) {
		t.Fatal("open group refused")
	}
	<-ran
	g.Close()
	g.Close()
	if g.Go(func() { t.Error("ran after Close") }) {
		t.Fatal("closed group accepted")
	}
	g.Wait()
}

func TestConnsCloseAll(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	var s Conns
	if !s.Add(a) || s.Len() != 1 {
		t.Fatal("Add")
	}
	s.CloseAll()
	s.CloseAll()
	if _, err := a.Write([]byte{1}); err == nil {
		t.Fatal("tracked conn still open")
	}
	c, d := net.Pipe()
	defer c.Close()
	defer d.Close()
	if s.Add(c) {
		t.Fatal("Add after CloseAll")
	}
}

// flakyListener fails its first accepts, then hands out conns, then
// reports closed.
type flakyListener struct {
	mu    sync.Mutex
	fails int
	conns []net.Conn
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fails > 0 {
		l.fails--
		return nil, errors.New("accept4: too many open files")
	}
	if len(l.conns) == 0 {
		return nil, net.ErrClosed
	}
	c := l.conns[0]
	l.conns = l.conns[1:]
	return c, nil
}

func (l *flakyListener) Close() error   { return nil }
func (l *flakyListener) Addr() net.Addr { return &net.TCPAddr{} }

func TestAcceptRetriesAndServesEveryConn(t *testing.T) {
	const n = 50
	l := &flakyListener{fails: 3}
	var peers []net.Conn
	for range n {
		a, b := net.Pipe()
		l.conns = append(l.conns, a)
		peers = append(peers, b)
	}
	accepted := slices.Clone(l.conns)
	var g Group
	var handled atomic.Int32
	var wg sync.WaitGroup
	wg.Add(n)
	var opened []net.Conn // by the accept loop alone
	err := Accept(l, &g, slog.New(slog.DiscardHandler), func(c net.Conn) func() {
		opened = append(opened, c)
		return func() {
			handled.Add(1)
			c.Close()
			wg.Done()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	g.Close()
	g.Wait() // workers end once Accept has returned
	if handled.Load() != n {
		t.Fatalf("handled %d of %d", handled.Load(), n)
	}
	if !slices.Equal(opened, accepted) {
		t.Fatal("connections opened out of accept order")
	}
	for _, p := range peers {
		p.Close()
	}
}

func TestAcceptClosesConnsAGroupRefuses(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	l := &flakyListener{conns: []net.Conn{a}}
	var g Group
	g.Close()
	Accept(l, &g, nil, func(net.Conn) func() {
		return func() { t.Error("handled on a closed group") }
	})
	if _, err := a.Write([]byte{1}); err == nil {
		t.Fatal("refused conn left open")
	}
}

// A Server closes a connection whose work is done, in the accept loop or
// in a worker, unless the work keeps it; Finish then closes it.
func TestServerKeepAndFinish(t *testing.T) {
	kept := make(chan net.Conn, 1)
	s := NewServer(func(c net.Conn) (func() bool, bool) {
		var b [1]byte
		c.Read(b[:])
		switch b[0] {
		case 'a': // done in the accept loop, closed
			return nil, false
		case 'k': // done in the accept loop, kept
			kept <- c
			return nil, true
		}
		return func() bool { return false }, false // done in a worker, closed
	}, nil)
	ln := serveLoopback(t, s)
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
	for _, b := range []byte{'a', 'w'} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte{b})
		if !closed(c) {
			t.Errorf("%q: connection not closed", b)
		}
		c.Close()
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{'k'})
	sc := <-kept
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("kept connection: read %v, want it still open", err)
	}
	s.Finish(sc)
	if !closed(c) {
		t.Fatal("Finish did not close the kept connection")
	}
}

// serveLoopback serves s on a 127.0.0.1 port until the test ends, and
// returns the listener.
func serveLoopback(t *testing.T, s *Server) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		s.Close()
		<-done
	})
	return ln
}
