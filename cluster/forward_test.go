package cluster

import (
	"net"
	"syscall"
	"testing"
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
