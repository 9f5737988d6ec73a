package serve

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// holdOpen serves a listener whose connections stay open until the client
// closes them; refused connections get "no" first.
func holdOpen(t *testing.T, g *Gate, operator bool) (addr string, refused *atomic.Int32) {
	t.Helper()
	refused = new(atomic.Int32)
	s := NewServer(Worker(func(c net.Conn) { io.Copy(io.Discard, c) }), nil)
	s.Limit(g, operator, func(c net.Conn) {
		refused.Add(1)
		c.Write([]byte("no"))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	t.Cleanup(func() { s.Close(); <-done })
	return ln.Addr().String(), refused
}

func dialT(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// answer reads what the server wrote before it closed, or "" for a
// connection it keeps open (nothing arrives within a short read).
func refusedWith(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestGateKeepsTheReserveForOperators(t *testing.T) {
	g := NewGate(3, 1)
	clients, refused := holdOpen(t, g, false)
	operators, _ := holdOpen(t, g, true)
	a, b := dialT(t, clients), dialT(t, clients)
	waitOpen(t, g, 2)
	if got := refusedWith(t, dialT(t, clients)); got != "no" || refused.Load() != 1 {
		t.Fatalf("a third client connection: %q, %d refused; want refused", got, refused.Load())
	}
	dialT(t, operators) // the reserve
	waitOpen(t, g, 3)
	a.Close()
	waitOpen(t, g, 2)
	c := dialT(t, clients)
	waitOpen(t, g, 3)
	_, _ = b, c
}

func waitOpen(t *testing.T, g *Gate, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for g.Open() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", g.Open(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLimitListener(t *testing.T) {
	g := NewGate(1, 0)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	ln := LimitListener(raw, g, false, func(net.Conn) { refused.Add(1) })
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dialT(t, raw.Addr().String())
	first := <-accepted
	second := dialT(t, raw.Addr().String())
	if got := refusedWith(t, second); got != "" || refused.Load() != 1 {
		t.Fatalf("second connection: %q, %d refused", got, refused.Load())
	}
	first.Close()
	first.Close() // a second Close gives back nothing more
	if g.Open() != 0 {
		t.Fatalf("%d open after the close", g.Open())
	}
	dialT(t, raw.Addr().String())
	<-accepted
	if g.Open() != 1 {
		t.Fatalf("%d open, want 1", g.Open())
	}
	if NewGate(0, 5) != nil || LimitListener(raw, nil, false, nil) != raw {
		t.Fatal("no cap should mean no gate")
	}
}
