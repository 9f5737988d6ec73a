//go:build linux

package main

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stalledAddr returns an address whose listen queue is full, so that a
// connect to it stalls: the kernel drops the handshake. ok is false when
// the system does not behave so.
func stalledAddr(t *testing.T) (addr string, ok bool) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			var ne net.Error
			return addr, errors.As(err, &ne) && ne.Timeout()
		}
		t.Cleanup(func() { c.Close() })
	}
	return addr, false
}

func TestConnectStallIsFailureNeverBusy(t *testing.T) {
	addr, ok := stalledAddr(t)
	if !ok {
		t.Skip("this system does not stall a connect to a full listen queue")
	}
	env := []string{"LC_ADDRESS=" + addr, "LC_MANAGER_ADDRESS=" + addr, "LC_CONNECT_TIMEOUT=200ms"}
	for _, args := range [][]string{{"trylock", "k"}, {"lock", "k", "--", "true"}, {"keys"}} {
		r := runInProcess(t, env, args...)
		if r.code != exitFailure {
			t.Errorf("%q against a stalled server = %d, want 2", args, r.code)
		}
		oneLine(t, r.stderr, addr, "timeout")
	}
}

func TestSignalEndsAStalledRequest(t *testing.T) {
	addr, ok := stalledAddr(t)
	if !ok {
		t.Skip("this system does not stall a connect to a full listen queue")
	}
	env := []string{"LC_ADDRESS=" + addr, "LC_MANAGER_ADDRESS=" + addr, "LC_CONNECT_TIMEOUT=10m"}
	for _, args := range [][]string{{"keys"}, {"reset", "k"}, {"trylock", "k"}, {"unlock", "k"}, {"wait", "k"}} {
		p := startInProcess(t, env, args...)
		p.signal(syscall.SIGINT)
		r := p.wait(t)
		if r.code != 130 {
			t.Errorf("%q interrupted = %d, want 130", args, r.code)
		}
		oneLine(t, r.stderr, addr, "interrupted")
	}
}
