package cluster

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// pair is tcpPair, closed when the test ends.
func pair(t *testing.T) (client, server net.Conn) {
	client, server = tcpPair(t)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// A request is forwarded only while its client is there: clientGone
// sees a client that closed or reset, keeps one that waits, and takes
// none of the bytes it sent.
func TestClientGone(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		client, server := pair(t)
		if _, err := client.Write([]byte("k")); err != nil {
			t.Fatal(err)
		}
		waitReadable(t, server)
		if clientGone(server) {
			t.Fatal("a waiting client is gone")
		}
		b := make([]byte, 1) // nothing was taken
		if _, err := server.Read(b); err != nil || b[0] != 'k' {
			t.Fatalf("a read after clientGone: %q %v", b, err)
		}
		if clientGone(server) {
			t.Fatal("a waiting client that sent nothing more is gone")
		}
	})
	t.Run("closed", func(t *testing.T) {
		client, server := pair(t)
		client.Close()
		// The end of stream is in once a blocking read would see it.
		waitReadable(t, server)
		if !clientGone(server) {
			t.Fatal("a client that closed is still there")
		}
	})
	t.Run("reset", func(t *testing.T) {
		client, server := pair(t)
		client.(*net.TCPConn).SetLinger(0)
		client.Close()
		waitReadable(t, server)
		if !clientGone(server) {
			t.Fatal("a client that reset is still there")
		}
	})
}

// waitReadable blocks until c has something to read (data, an end of
// stream or an error), without taking it.
func waitReadable(t *testing.T, c net.Conn) {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	rc.Read(func(fd uintptr) bool { // the poller waits while this says false
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		return err != syscall.EAGAIN
	})
}

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
