package serve

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The io_uring interface of Linux (include/uapi/linux/io_uring.h), the
// part SendRing uses: since 5.6 for IORING_OP_SEND.
const (
	sysIOURingSetup = 425
	sysIOURingEnter = 426

	ioringOffSQRing = 0 // the completion ring shares its mapping (IORING_FEAT_SINGLE_MMAP)
	ioringOffSQEs   = 0x10000000

	ioringFeatSingleMmap = 1 << 0
	ioringEnterGetEvents = 1 << 0
	ioringSetupSubmitAll = 1 << 7
	ioringOpSend         = 26
)

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

// uringSQE is a submission queue entry: 64 bytes.
type uringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFDIn  int32
	addr3       uint64
	pad         uint64
}

// uringCQE is a completion queue entry: 16 bytes.
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// SendRing sends to many sockets in one system call: an io_uring
// (io_uring_setup(2), Linux 5.6 and later) whose submissions are sends
// that never wait (MSG_DONTWAIT), so that each is done, or refused with
// EAGAIN, within the call that submits it. A loop that serves many
// connections on one thread writes its answers with it: a write on
// loopback wakes the client it answers, and when the client shares the
// server's processors, the server's thread was switched out on its way
// back from that write, once per answer; one call for all of them is
// switched out once (docs/benchmarks.md, "Answers sent in one call").
// It is not safe for concurrent use.
type SendRing struct {
	fd      int
	rings   []byte // the submission and completion rings, one mapping
	sqes    []byte
	entries uint32

	sqTail  *uint32
	sqMask  uint32
	sqArray unsafe.Pointer
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    unsafe.Pointer
}

// ErrRingClosed is Send's error once the ring is closed, by Close or by
// a call the kernel refused.
var ErrRingClosed = errors.New("io_uring: closed")

// NewSendRing makes a ring of entries submissions, rounded up to a power
// of two by the kernel. Errors: io_uring_setup's (ENOSYS on a kernel
// without io_uring, EPERM where it is turned off, as by the sysctl
// kernel.io_uring_disabled or a container's seccomp profile), mmap's, or
// a kernel older than 5.4, whose rings need two mappings.
func NewSendRing(entries uint32) (*SendRing, error) {
	var p uringParams
	p.flags = ioringSetupSubmitAll
	fd, _, e := syscall.Syscall(sysIOURingSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e == syscall.EINVAL { // before 5.18: no IORING_SETUP_SUBMIT_ALL
		p = uringParams{}
		fd, _, e = syscall.Syscall(sysIOURingSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	}
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	syscall.CloseOnExec(int(fd))
	r := &SendRing{fd: int(fd), entries: p.sqEntries}
	if p.features&ioringFeatSingleMmap == 0 {
		r.Close()
		return nil, errors.New("io_uring: the kernel maps its rings apart")
	}
	size := max(p.sqOff.array+p.sqEntries*4, p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))
	var err error
	prot, flags := syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE
	if r.rings, err = syscall.Mmap(r.fd, ioringOffSQRing, int(size), prot, flags); err != nil {
		r.Close()
		return nil, fmt.Errorf("io_uring rings: %w", err)
	}
	if r.sqes, err = syscall.Mmap(r.fd, ioringOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(uringSQE{})), prot, flags); err != nil {
		r.Close()
		return nil, fmt.Errorf("io_uring entries: %w", err)
	}
	base := unsafe.Pointer(&r.rings[0])
	r.sqTail = (*uint32)(unsafe.Add(base, p.sqOff.tail))
	r.sqMask = *(*uint32)(unsafe.Add(base, p.sqOff.ringMask))
	r.sqArray = unsafe.Add(base, p.sqOff.array)
	r.cqHead = (*uint32)(unsafe.Add(base, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(base, p.cqOff.tail))
	r.cqMask = *(*uint32)(unsafe.Add(base, p.cqOff.ringMask))
	r.cqes = unsafe.Add(base, p.cqOff.cqes)
	return r, nil
}

// Close releases the ring; Send then fails with ErrRingClosed. It is
// safe to call more than once.
func (r *SendRing) Close() {
	if r.sqes != nil {
		syscall.Munmap(r.sqes)
		r.sqes = nil
	}
	if r.rings != nil {
		syscall.Munmap(r.rings)
		r.rings = nil
	}
	if r.fd >= 0 {
		syscall.Close(r.fd)
		r.fd = -1
	}
}

// Send sends bufs[i] to the socket fds[i], each as one send(2) with
// MSG_DONTWAIT and MSG_NOSIGNAL, in as few calls as the ring's size
// allows, and sets n[i] to the bytes sent or to minus the errno
// (-EAGAIN: the socket was full). Each fd must stay open, and each
// buffer unchanged, until Send returns. It returns how many of the sends
// it made, from the first: all of them, or, with an error (the kernel
// refused a call, or the ring is closed), fewer, and the ring is closed;
// a send made whose outcome the kernel did not tell then has n[i] -EIO.
func (r *SendRing) Send(fds []int, bufs [][]byte, n []int) (int, error) {
	made := 0
	for made < len(fds) {
		if r.fd < 0 {
			return made, ErrRingClosed
		}
		k := min(len(fds)-made, int(r.entries))
		sent, err := r.send(fds[made:made+k], bufs[made:made+k], n[made:made+k])
		made += sent
		if err != nil {
			r.Close()
			return made, err
		}
	}
	return made, nil
}

// pending marks a send submitted whose completion has not been read.
const pending = math.MinInt32

// send is Send of at most r.entries sends.
func (r *SendRing) send(fds []int, bufs [][]byte, n []int) (int, error) {
	defer runtime.KeepAlive(bufs)
	tail := *r.sqTail // only this side moves it
	for i, fd := range fds {
		idx := tail & r.sqMask
		e := (*uringSQE)(unsafe.Add(unsafe.Pointer(&r.sqes[0]), uintptr(idx)*unsafe.Sizeof(uringSQE{})))
		*e = uringSQE{opcode: ioringOpSend, fd: int32(fd), len: uint32(len(bufs[i])),
			opFlags: syscall.MSG_DONTWAIT | syscall.MSG_NOSIGNAL, userData: uint64(i)}
		if len(bufs[i]) > 0 {
			e.addr = uint64(uintptr(unsafe.Pointer(&bufs[i][0])))
		}
		*(*uint32)(unsafe.Add(r.sqArray, uintptr(idx)*4)) = idx
		tail++
	}
	atomic.StoreUint32(r.sqTail, tail)
	// The submitting call never waits: a send that cannot go at once
	// completes with -EAGAIN (MSG_DONTWAIT), so its completion is
	// normally in the ring when the call returns.
	var submitted uintptr
	var e syscall.Errno
	for {
		submitted, _, e = syscall.RawSyscall6(sysIOURingEnter, uintptr(r.fd), uintptr(len(fds)), 0, 0, 0, 0)
		if e != syscall.EINTR {
			break
		}
	}
	if e != 0 {
		return 0, fmt.Errorf("io_uring_enter: %w", e)
	}
	want := int(submitted)
	for i := range want {
		n[i] = pending
	}
	for done := 0; ; {
		head := *r.cqHead
		for ctail := atomic.LoadUint32(r.cqTail); head != ctail; head++ {
			c := (*uringCQE)(unsafe.Add(r.cqes, uintptr(head&r.cqMask)*unsafe.Sizeof(uringCQE{})))
			n[c.userData] = int(c.res)
			done++
		}
		atomic.StoreUint32(r.cqHead, head)
		if done >= want {
			break
		}
		// Not expected with MSG_DONTWAIT; an ordinary call, in case it waits.
		_, _, e = syscall.Syscall6(sysIOURingEnter, uintptr(r.fd), 0, uintptr(want-done), ioringEnterGetEvents, 0, 0)
		if e != 0 && e != syscall.EINTR {
			// What was submitted may still go: its connections are
			// failed rather than written again.
			for i := range want {
				if n[i] == pending {
					n[i] = -int(syscall.EIO)
				}
			}
			return want, fmt.Errorf("io_uring_enter: %w", e)
		}
	}
	if want < len(fds) {
		return want, fmt.Errorf("io_uring_enter: %d of %d sends submitted", want, len(fds))
	}
	return want, nil
}
