package serve

import (
	"errors"
	"syscall"
	"testing"
)

// TestRawIO reads and writes a socket pair and waits on an epoll set
// with the raw calls: they give what syscall.Read, Write and EpollWait
// give, EAGAIN included.
func TestRawIO(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	writerOpen := true
	defer func() {
		if writerOpen {
			syscall.Close(fds[0])
		}
	}()
	defer syscall.Close(fds[1])
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(epfd)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: 7}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, fds[1], &ev); err != nil {
		t.Fatal(err)
	}
	events := make([]syscall.EpollEvent, 4)
	if n, err := EpollWaitNow(epfd, events); n != 0 || err != nil {
		t.Fatalf("EpollWaitNow of an idle set = %d, %v; want 0, nil", n, err)
	}
	buf := make([]byte, 8)
	if n, err := ReadNow(fds[1], buf); n != -1 || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("ReadNow with nothing to read = %d, %v; want -1, EAGAIN", n, err)
	}
	if n, err := WriteNow(fds[0], []byte("hello")); n != 5 || err != nil {
		t.Fatalf("WriteNow = %d, %v; want 5, nil", n, err)
	}
	if n, err := EpollWaitNow(epfd, events); n != 1 || err != nil || events[0].Fd != 7 {
		t.Fatalf("EpollWaitNow with bytes = %d, %v, fd %d; want 1, nil, 7", n, err, events[0].Fd)
	}
	if n, err := ReadNow(fds[1], buf); n != 5 || err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("ReadNow = %d, %v, %q; want 5, nil, hello", n, err, buf[:max(n, 0)])
	}
	if n, err := WriteNow(-1, []byte("x")); n != -1 || !errors.Is(err, syscall.EBADF) {
		t.Fatalf("WriteNow of a bad descriptor = %d, %v; want -1, EBADF", n, err)
	}
	if n, err := EpollWaitNow(-1, events); n != -1 || !errors.Is(err, syscall.EBADF) {
		t.Fatalf("EpollWaitNow of a bad descriptor = %d, %v; want -1, EBADF", n, err)
	}
	syscall.Close(fds[0])
	writerOpen = false
	if n, err := ReadNow(fds[1], buf); n != 0 || err != nil {
		t.Fatalf("ReadNow at the end = %d, %v; want 0, nil", n, err)
	}
}
