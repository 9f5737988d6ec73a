//go:build unix

package serve

import (
	"fmt"
	"net"
	"syscall"
	"testing"
)

// waitReadable blocks until c has something to read (data, an end of
// stream or an error), without taking it.
func waitReadable(t *testing.T, c *net.TCPConn) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	rc.Read(func(fd uintptr) bool { // the poller waits while this says false
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		return err != syscall.EAGAIN
	})
}

// PeerGone sees a peer that closed or reset, keeps one that waits, takes
// none of the bytes it sent, and answers at once while a read of the
// connection waits in another goroutine.
func TestPeerGone(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		server, client := tcpPair(t)
		if _, err := client.Write([]byte("k")); err != nil {
			t.Fatal(err)
		}
		waitReadable(t, server)
		if PeerGone(server) {
			t.Fatal("a waiting peer is gone")
		}
		b := make([]byte, 1) // nothing was taken
		if _, err := server.Read(b); err != nil || b[0] != 'k' {
			t.Fatalf("a read after PeerGone: %q %v", b, err)
		}
		if PeerGone(server) {
			t.Fatal("a waiting peer that sent nothing more is gone")
		}
	})
	for _, linger := range []int{-1, 0} { // a close; a reset
		t.Run(fmt.Sprintf("linger %d", linger), func(t *testing.T) {
			server, client := tcpPair(t)
			client.SetLinger(linger)
			client.Close()
			// The end is in once a blocking read would see it.
			waitReadable(t, server)
			if !PeerGone(server) {
				t.Fatal("a peer that left is still there")
			}
		})
	}
	t.Run("while a read waits", func(t *testing.T) {
		server, client := tcpPair(t)
		read := make(chan error, 1)
		go func() {
			_, err := server.Read(make([]byte, 1))
			read <- err
		}()
		if PeerGone(server) {
			t.Fatal("a waiting peer is gone")
		}
		client.Close()
		if err := <-read; err == nil {
			t.Fatal("the read took a byte nobody sent")
		}
		if !PeerGone(server) {
			t.Fatal("a peer that closed is still there")
		}
	})
	t.Run("closed here", func(t *testing.T) {
		server, _ := tcpPair(t)
		server.Close()
		if !PeerGone(server) {
			t.Fatal("a connection closed here has its peer")
		}
	})
}
