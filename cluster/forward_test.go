package cluster

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A node that stops cuts every connection it dialled for raft, and dials
// no more: none of raft's goroutines can then wait on a peer that keeps
// taking bytes and answers nothing.
func TestCutDialled(t *testing.T) {
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	s := newTCPStream(ln, ln.Addr(), func(ctx context.Context, addr raft.ServerAddress) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", string(addr))
	}, func(net.Conn) {}, nil, slog.New(slog.DiscardHandler))
	defer s.Close()
	var accepted []net.Conn
	for range 2 {
		if _, err := s.Dial(raft.ServerAddress(peer.Addr().String()), time.Second); err != nil {
			t.Fatal(err)
		}
		c, err := peer.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		accepted = append(accepted, c)
	}
	// One the transport closed itself is forgotten.
	c, err := s.Dial(raft.ServerAddress(peer.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := len(s.dialled); n != 2 {
		t.Fatalf("%d connections kept, want 2", n)
	}
	s.cutDialled()
	for i, c := range accepted {
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("connection %d still open after the cut", i)
		}
	}
	if _, err := s.Dial(raft.ServerAddress(peer.Addr().String()), time.Second); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a dial after the cut: %v, want net.ErrClosed", err)
	}
}
