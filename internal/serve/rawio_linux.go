package serve

import (
	"syscall"
	"unsafe"
)

// ReadNow reads into b from fd, a descriptor in non-blocking mode, as
// syscall.Read does, but without telling the Go scheduler: a read that
// cannot wait is over in microseconds, and the scheduler's bookkeeping
// around a system call (waking its monitor thread, which then takes the
// processor away from a loop that is always in one) costs more than the
// read itself when one goroutine serves many connections. Errors are
// the read's errno (syscall.EAGAIN when there is nothing to read); n is
// -1 with an error, as with syscall.Read. fd must never block.
func ReadNow(fd int, b []byte) (n int, err error) { return rawIO(syscall.SYS_READ, fd, b) }

// WriteNow writes b to fd, a descriptor in non-blocking mode, as ReadNow
// reads: syscall.Write without the scheduler's bookkeeping. A full socket
// is syscall.EAGAIN.
func WriteNow(fd int, b []byte) (n int, err error) { return rawIO(syscall.SYS_WRITE, fd, b) }

// rawIO makes the read or write trap of b on fd as a raw system call.
func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	r, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(p), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// EpollWaitNow takes the ready events of the epoll set epfd without
// waiting (a timeout of zero), as ReadNow reads.
func EpollWaitNow(epfd int, events []syscall.EpollEvent) (n int, err error) {
	var p unsafe.Pointer
	if len(events) > 0 {
		p = unsafe.Pointer(&events[0])
	}
	r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(p), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}
