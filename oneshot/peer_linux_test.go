package oneshot

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A parked connection gets TCP keep-alive, so that a waiter whose host
// vanished is found out, even on a listener that accepts without it; a
// connection that has not sent its request yet does not.
func TestParkedConnectionKeepAlive(t *testing.T) {
	ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, done := serveTableOn(t, newNode(), ServerConfig{Logger: testLogger(t)}, ln)
	t.Cleanup(func() {
		s.srv.Close()
		<-done
	})
	if a := s.do(t, lockReq("k", "holder")); a != AnswerOK {
		t.Fatalf("holder: %q", a)
	}
	silent := s.dial(t)
	parked := s.park(t, "k", "w")
	eventually(t, "keep-alive on the parked connection", func() bool { return keepAliveTimer(t, parked) })
	if keepAliveTimer(t, silent) {
		t.Error("a connection still owing its request has a keep-alive timer")
	}
}

// keepAliveTimer reports whether the server's end of c runs the kernel's
// keep-alive timer, from the "tr" column of /proc/net/tcp (2: keep-alive).
func keepAliveTimer(t *testing.T, c net.Conn) bool {
	t.Helper()
	local := c.RemoteAddr().(*net.TCPAddr).Port // the server's end
	remote := c.LocalAddr().(*net.TCPAddr).Port // the client's end
	for _, s := range tcpSockets(t) {
		if s.local == local && s.remote == remote {
			return strings.HasPrefix(s.timer, "02:")
		}
	}
	t.Fatalf("no socket %d->%d in /proc/net/tcp", local, remote)
	return false
}

// Listen defers accepts until a request's bytes arrive, and accepts
// without keep-alive.
func TestListenOptions(t *testing.T) {
	ln, err := Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lrc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var deferSecs int
	lrc.Control(func(fd uintptr) {
		deferSecs, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT)
	})
	if err != nil || deferSecs <= 0 {
		t.Fatalf("TCP_DEFER_ACCEPT %d, %v", deferSecs, err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(AppendRequest(nil, lockReq("k", "")))
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	rc, _ := sc.(*net.TCPConn).SyscallConn()
	var ka int
	rc.Control(func(fd uintptr) {
		ka, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
	})
	if err != nil || ka != 0 {
		t.Fatalf("SO_KEEPALIVE %d, %v on an accepted connection", ka, err)
	}
}

// A parked waiter that is granted and closes with its '+' unread, right
// as the '+' arrives, never keeps the key: over many rounds the next waiter
// always gets it.
func TestGrantedWaiterClosingUnreadPassesOn(t *testing.T) {
	bothTransports(t, testGrantedWaiterClosingUnreadPassesOn)
}

func testGrantedWaiterClosingUnreadPassesOn(t *testing.T, start starter) {
	s := start(t, ServerConfig{})
	for i := range 200 {
		key := "unread" + strconv.Itoa(i)
		if a := s.do(t, lockReq(key, "holder")); a != AnswerOK {
			t.Fatalf("holder: %q", a)
		}
		w := s.park(t, key, "w")
		next := s.park(t, key, "next")
		before := unread(t, w) // with TLS, what the handshake left
		if a := s.do(t, Request{Action: ActionUnlock, Key: key}); a != AnswerOK {
			t.Fatalf("unlock: %q", a)
		}
		waitUnread(t, w, before)
		w.Close() // with the '+' unread: a reset
		if a := readAnswer(t, next); a != AnswerOK {
			t.Fatalf("round %d: next waiter answered %q", i, a)
		}
		next.Close()
		s.do(t, Request{Action: ActionUnlock, Key: key})
	}
}

// waitUnread waits until more than before bytes have arrived on c's
// socket, without reading them.
func waitUnread(t *testing.T, c *clientConn, before int) {
	t.Helper()
	eventually(t, "the '+' in the receive buffer", func() bool { return unread(t, c) > before })
}

// unread returns how many bytes have arrived on c's socket unread.
func unread(t *testing.T, c *clientConn) int {
	t.Helper()
	rc, err := c.tcp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	rc.Control(func(fd uintptr) {
		if n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ); err != nil {
			t.Fatal(err)
		}
	})
	return n
}
