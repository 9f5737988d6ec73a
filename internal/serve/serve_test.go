package serve

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	var g Group
	var handled atomic.Int32
	var wg sync.WaitGroup
	wg.Add(n)
	err := Accept(l, &g, slog.New(slog.DiscardHandler), func(c net.Conn) {
		handled.Add(1)
		c.Close()
		wg.Done()
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
	Accept(l, &g, nil, func(net.Conn) { t.Error("handled on a closed group") })
	if _, err := a.Write([]byte{1}); err == nil {
		t.Fatal("refused conn left open")
	}
}
