package serve

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/testcerts"
	"golang.org/x/sys/unix"
)

// tcpCloseWait is TCP_CLOSE_WAIT of include/net/tcp_states.h.
const tcpCloseWait = 8

// What WriteLast writes reaches the peer with the end of the connection:
// by the time the peer has read the bytes, its socket has the FIN too
// (CLOSE_WAIT), so that the peer closes second. Under TLS (through the
// write queue of UseTLS) too, with a close_notify and without.
func TestWriteLastArrivesWithTheEnd(t *testing.T) {
	ca := testcerts.NewCA(t, "CA")
	cfg := &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}}
	for _, tc := range []struct {
		name   string
		tls    bool
		notify bool
	}{
		{"tcp", false, false},
		{"tls", true, false},
		{"tls with close_notify", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			written := make(chan error, 1)
			s := NewServer(func(c net.Conn) (func() bool, bool) {
				return func() bool {
					written <- WriteLast(c, []byte("+"), tc.notify)
					io.Copy(io.Discard, c) // until the peer closes
					return false
				}, false
			}, nil)
			if tc.tls {
				s.UseTLS(cfg, time.Minute)
			}
			ln := serveLoopback(t, s)
			raw, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			c := raw
			if tc.tls {
				cfg := testcerts.ClientConfig(ca, nil)
				cfg.ServerName = "127.0.0.1"
				c = tls.Client(raw, cfg)
			}
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != '+' {
				t.Fatalf("read %q, %v", b[0], err)
			}
			if st := tcpState(t, raw.(*net.TCPConn)); st != tcpCloseWait {
				t.Errorf("once the bytes are read, the reader's TCP state is %d, want CLOSE_WAIT (%d)", st, tcpCloseWait)
			}
			if err := <-written; err != nil {
				t.Fatalf("WriteLast: %v", err)
			}
		})
	}
}

// tcpState returns the TCP state of c's socket.
func tcpState(t *testing.T, c *net.TCPConn) uint8 {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	rc.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}
