package serve

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
)

// newRing makes a ring of entries, or skips the test where the kernel
// refuses io_uring (the server then writes one call each).
func newRing(t *testing.T, entries uint32) *SendRing {
	t.Helper()
	r, err := NewSendRing(entries)
	if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM) {
		t.Skipf("io_uring refused here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// tcpPairs returns k connected loopback pairs: the sending sides' fds,
// and the receiving sides.
func tcpPairs(t *testing.T, k int) (fds []int, peers []net.Conn, senders []net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range k {
		peer, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { peer.Close(); c.Close() })
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) })
		peers, senders = append(peers, peer), append(senders, c)
	}
	return fds, peers, senders
}

// Each socket gets its own bytes, all of them, from one Send; a ring
// smaller than the sends makes more calls.
func TestSendRingSendsEachItsOwn(t *testing.T) {
	for _, entries := range []uint32{4, 64} {
		t.Run(fmt.Sprint(entries, " entries"), func(t *testing.T) {
			r := newRing(t, entries)
			const k = 10
			fds, peers, _ := tcpPairs(t, k)
			for round := range 3 {
				bufs, n := make([][]byte, k), make([]int, k)
				for i := range bufs {
					bufs[i] = fmt.Appendf(nil, "round %d socket %d %s", round, i, bytes.Repeat([]byte{'x'}, i*100))
				}
				made, err := r.Send(fds, bufs, n)
				if err != nil || made != k {
					t.Fatalf("Send made %d of %d: %v", made, k, err)
				}
				for i, p := range peers {
					if n[i] != len(bufs[i]) {
						t.Fatalf("socket %d: %d bytes sent, want %d", i, n[i], len(bufs[i]))
					}
					got := make([]byte, len(bufs[i]))
					if _, err := io.ReadFull(p, got); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, bufs[i]) {
						t.Fatalf("socket %d got %q, want %q", i, got, bufs[i])
					}
				}
			}
		})
	}
}

// A socket that takes no more is told EAGAIN (or takes a part) at once,
// without the call waiting, and the other sends of the call go through.
func TestSendRingFullSocketDoesNotWait(t *testing.T) {
	r := newRing(t, 8)
	fds, peers, senders := tcpPairs(t, 2)
	senders[0].(*net.TCPConn).SetWriteBuffer(4096)
	peers[0].(*net.TCPConn).SetReadBuffer(4096)
	big := bytes.Repeat([]byte{'b'}, 1<<20)
	small := []byte("still delivered")
	n := make([]int, 2)
	for try := 0; ; try++ {
		if try == 100 {
			t.Fatal("a socket nobody reads took 100 MiB")
		}
		if _, err := r.Send(fds, [][]byte{big, small}, n); err != nil {
			t.Fatal(err)
		}
		if n[1] != len(small) {
			t.Fatalf("the other socket: %d bytes sent, want %d", n[1], len(small))
		}
		got := make([]byte, len(small))
		if _, err := io.ReadFull(peers[1], got); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("the other socket got %q, %v", got, err)
		}
		if n[0] == -int(syscall.EAGAIN) {
			return
		}
		if n[0] < 0 {
			t.Fatalf("the full socket: %v, want EAGAIN", syscall.Errno(-n[0]))
		}
	}
}

// A send to a socket whose peer is gone fails with its errno, with no
// SIGPIPE.
func TestSendRingPeerGone(t *testing.T) {
	r := newRing(t, 8)
	fds, peers, _ := tcpPairs(t, 1)
	peers[0].(*net.TCPConn).SetLinger(0) // its close resets the connection
	peers[0].Close()
	n := make([]int, 1)
	for try := 0; ; try++ {
		if try == 1000 {
			t.Fatal("sends to a reset connection kept succeeding")
		}
		if _, err := r.Send(fds, [][]byte{[]byte("anyone?")}, n); err != nil {
			t.Fatal(err)
		}
		if n[0] < 0 {
			if e := syscall.Errno(-n[0]); e != syscall.ECONNRESET && e != syscall.EPIPE {
				t.Fatalf("send to a reset connection: %v, want ECONNRESET or EPIPE", e)
			}
			return
		}
	}
}

// A closed ring makes no send.
func TestSendRingClosed(t *testing.T) {
	r := newRing(t, 8)
	fds, _, _ := tcpPairs(t, 1)
	r.Close()
	r.Close()
	made, err := r.Send(fds, [][]byte{[]byte("x")}, make([]int, 1))
	if made != 0 || !errors.Is(err, ErrRingClosed) {
		t.Fatalf("Send on a closed ring: %d, %v; want 0, ErrRingClosed", made, err)
	}
}
