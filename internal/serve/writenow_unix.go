//go:build unix

package serve

import (
	"errors"
	"net"
	"syscall"
)

// NowWriter writes to a connection's socket without waiting. Made once
// per connection (Init), a write allocates nothing. It is not safe for
// concurrent use: its caller serialises writes.
type NowWriter struct {
	c       net.Conn
	rc      syscall.RawConn // nil: c has no descriptor (a *tls.Conn, a net.Pipe)
	rcErr   error
	fn      func(fd uintptr) bool // w.writeFD, bound once
	b       []byte                // being written
	written int
	err     error
	plain   bool // this write is an ordinary system call (WritePush)
}

// Init sets w to write to c.
func (w *NowWriter) Init(c net.Conn) {
	w.c = c
	if sc, ok := c.(syscall.Conn); ok {
		w.rc, w.rcErr = sc.SyscallConn()
		w.fn = w.writeFD
	}
}

// Raw returns the descriptor's access of the connection, nil when it has
// none (a *tls.Conn, a net.Pipe) or it could not be had.
func (w *NowWriter) Raw() syscall.RawConn {
	if w.rcErr != nil {
		return nil
	}
	return w.rc
}

// Write writes as much of b as the socket takes without waiting, and
// returns how much that was, with a raw system call (WriteNow). A
// connection without a descriptor (a *tls.Conn, a net.Pipe) is written
// with its Write, which may wait. Errors: the write's, other than a full
// socket.
func (w *NowWriter) Write(b []byte) (int, error) { return w.write(b, false) }

// WritePush is Write with an ordinary system call, for a frame the server
// pushes to a client that waits for it (a grant of a contended key): one
// that starts the client's turn, whose next request the server then wants
// to read as soon as it comes. An ordinary call wakes the Go runtime's
// monitor thread, which then looks at the processors every 20 µs for a
// while and so keeps the one the server runs on awake; with raw calls
// only, the server's thread and its processor went to sleep between one
// holder's release and the next, and a hot key's handoff (release to
// next grant, p50) took 100 to 110 µs on a 2-core virtual machine where
// it takes 31 to 34 µs so (docs/benchmarks.md, "Raw system calls").
func (w *NowWriter) WritePush(b []byte) (int, error) { return w.write(b, true) }

func (w *NowWriter) write(b []byte, plain bool) (int, error) {
	if w.rcErr != nil {
		return 0, w.rcErr
	}
	if w.rc == nil {
		return w.c.Write(b)
	}
	w.b, w.written, w.err, w.plain = b, 0, nil, plain
	err := w.rc.Write(w.fn)
	n := w.written
	if err == nil {
		err = w.err
	}
	w.b, w.err = nil, nil
	return n, err
}

// writeFD is the body of the descriptor's write: it returns true at once,
// whatever happened, so that the poller never waits.
func (w *NowWriter) writeFD(fd uintptr) bool {
	for w.written < len(w.b) {
		write := WriteNow
		if w.plain {
			write = syscall.Write
		}
		n, err := write(int(fd), w.b[w.written:])
		if n > 0 {
			w.written += n
		}
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return true // full: the rest goes to a goroutine
		case err != nil:
			w.err = err
			return true
		case n == 0:
			return true
		}
	}
	return true
}
