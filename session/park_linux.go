//go:build linux

package session

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"

	"github.com/locking-center/locking-center/internal/serve"
)

// pollRead is the poller's read buffer, in bytes: far more than a
// client's PINGs of one keepalive, and no more than the read buffer of a
// connection's goroutine, so that a burst of frames is handled in batches
// of the same size as when it comes to a goroutine (a batch's answers are
// queued before they are written, and a larger batch would grow the queue).
const pollRead = initialRead

// poller holds the parked connections of a server (Config.ParkAfter) in an
// epoll set of its own, edge-triggered (rearm), and one goroutine waits
// for all of them: it waits in the Go runtime's poller for the set's
// descriptor to be readable, so no thread blocks in epoll_wait. When a
// parked connection has bytes, the poller reads them; if they are whole
// PINGs only, it answers them itself and the connection stays parked;
// anything else (another frame, a frame cut short, the end of the
// connection) takes the connection out of the set and gives it back to
// a goroutine of its own, with the bytes read. A parked connection costs
// no goroutine and no buffers, and a PING on it a read and a write.
//
// A parked connection belongs to the poller: only the poller, or close
// (closeParked), takes it out, under mu, and whoever takes it out owns it
// from then on. The poller answers PINGs only while the session owes its
// client nothing, so that their OKs never pass what was owed before them
// (a grant on its way to the log, say); otherwise the connection's
// goroutine queues them behind it.
type poller struct {
	srv    *Server
	set    *os.File        // the epoll set, in the runtime's poller
	setRaw syscall.RawConn // of set

	mu    sync.Mutex
	conns map[uint64]*conn // parked, by the id their events carry
	next  uint64           // the last id given
	done  bool
	seen  func(what string) // tests: told "parked", "answered", "unparked", "ended", "closing", "refused"

	buf [pollRead]byte
	out []byte // the OKs of the PINGs read
	f   Frame

	readFn func(fd uintptr) bool // p.readFD, bound once
	n      int                   // of the last readFD
	err    error

	held   []*conn  // served in this take, their answers held (conn.hold)
	rooms  [][]byte // write buffers to lend to the connections held
	events []syscall.EpollEvent
	nev    int                   // events[:nev] came from the last waitFD
	waitFn func(fd uintptr) bool // p.waitFD, bound once

	// Of unholdRing: nil ring, each held connection's answers are
	// written with a call of their own.
	ring   *serve.SendRing
	sendFn func(fds []int, bufs [][]byte, n []int) (int, error) // ring.Send; tests replace it
	batch  []ringItem
	cur    int                   // batch[:cur] have their descriptors held (chain)
	linkFn func(fd uintptr) bool // p.link, bound once
	fds    []int
	bufs   [][]byte
	sent   []int
	cuts   []*conn
}

// ringItem is a held connection whose answers go in the ring's call,
// and what became of them.
type ringItem struct {
	c   *conn
	rc  syscall.RawConn
	fd  int // -1: not held
	n   int
	err error
}

// newPoller makes s's poller and starts its goroutine in s.group.
// Errors: those of epoll_create1, or of putting its descriptor in the
// runtime's poller.
func newPoller(s *Server) (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("epoll set: %w", err)
	}
	p := &poller{srv: s, set: os.NewFile(uintptr(epfd), "session-poller"), conns: make(map[uint64]*conn),
		events: make([]syscall.EpollEvent, 256)}
	p.readFn, p.waitFn, p.linkFn = p.readFD, p.waitFD, p.link
	if s.loop && !s.cfg.NoSendRing {
		if p.ring, err = serve.NewSendRing(uint32(len(p.events))); err != nil {
			s.log.Info("session poller writes each answer with a call of its own", slog.Any(logError, err))
			p.ring = nil
		} else {
			p.sendFn = p.ring.Send
		}
	}
	if p.setRaw, err = p.set.SyscallConn(); err != nil {
		p.set.Close()
		return nil, fmt.Errorf("epoll set: %w", err)
	}
	if !s.group.Go(p.loop) {
		if p.ring != nil {
			p.ring.Close()
		}
		p.set.Close()
		return nil, errors.New("the server is closed")
	}
	return p, nil
}

// close ends the loop; connections still parked are left as they are
// (the server closes them). It is safe to call more than once.
func (p *poller) close() {
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
	p.set.Close() // wakes the loop
}

// ctl applies an epoll_ctl op to c's descriptor; both it and the set may
// be closed already.
func (p *poller) ctl(c *conn, op int, ev *syscall.EpollEvent) error {
	var err error
	cerr := p.setRaw.Control(func(epfd uintptr) {
		cerr := c.raw.Control(func(fd uintptr) {
			err = syscall.EpollCtl(int(epfd), op, int(fd), ev)
		})
		if err == nil {
			err = cerr
		}
	})
	if err == nil {
		err = cerr
	}
	return err
}

// note tells the tests' hook what happened to a connection.
func (p *poller) note(what string) {
	p.mu.Lock()
	f := p.seen
	p.mu.Unlock()
	if f != nil {
		f(what)
	}
}

// event returns the epoll event of the connection of id. It is
// edge-triggered: the set reports a connection once for each arrival of
// bytes (or of its end) after the last report, so a take does not poll
// again every connection it has just read, as a level-triggered set does
// (one socket poll per request fewer). Whoever reads a report must so
// leave nothing unread that no new arrival will report: rearm.
func event(id uint64) syscall.EpollEvent {
	return syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | edge,
		Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

// edge is EPOLLET as the events' type holds it (syscall's constant is a
// negative int).
const edge = uint32(1) << 31

// hangup are the events after which a connection's end (or its error)
// waits behind the bytes a read takes, with no arrival to come.
const hangup = syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR

// rearm asks the set for a report of the connection of id, parked, if it
// has bytes unread or has ended: after a read that filled the poller's
// buffer (more may wait behind it) or that came with a hangup (its end
// waits behind the bytes read), since no new arrival would report them.
// An error (the descriptor closed meanwhile) is left to whoever closed it.
func (p *poller) rearm(c *conn, id uint64) {
	ev := event(id)
	p.ctl(c, syscall.EPOLL_CTL_MOD, &ev)
}

// add parks c and reports whether it did. When it did, c may be back in
// another goroutine, or ended, before add returns.
func (p *poller) add(c *conn) bool {
	p.mu.Lock()
	if p.done || c.closeWanted {
		f := p.seen
		p.mu.Unlock()
		if f != nil {
			f("refused")
		}
		return false
	}
	p.next++
	id := p.next
	c.parkID = id
	p.conns[id] = c
	p.mu.Unlock()
	ev := event(id)
	if p.ctl(c, syscall.EPOLL_CTL_ADD, &ev) == nil {
		p.note("parked")
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[id] != c {
		return true // closed meanwhile: closeParked ended it
	}
	delete(p.conns, id)
	c.parkID = 0
	return false
}

// remove takes c out of the epoll set. Its descriptor may be closed
// already, and with it its place in the set.
func (p *poller) remove(c *conn) { p.ctl(c, syscall.EPOLL_CTL_DEL, nil) }

// closeParked closes c if it is parked, ends it, and reports whether it
// was parked. A connection the poller is reading or answering is closed
// and left to the poller to end. One that is not parked is marked so that
// it parks no more: its descriptor, once closed, would leave the epoll
// set without an event, and nothing would end it.
func (p *poller) closeParked(c *conn) bool {
	p.mu.Lock()
	if c.parkID == 0 {
		c.closeWanted = true
		f := p.seen
		p.mu.Unlock()
		if f != nil {
			f("closing")
		}
		return false
	}
	if c.pollBusy {
		c.closeWanted = true
		p.mu.Unlock()
		c.nc.Close()
		return true
	}
	p.drop(c)
	return true
}

// drop takes c, parked, out of the set, closes and ends it. It is called
// with p.mu held, and releases it.
func (p *poller) drop(c *conn) {
	delete(p.conns, c.parkID)
	c.parkID = 0
	p.mu.Unlock()
	p.remove(c)
	if !c.owesLast { // else end closes it once it has what it is owed
		c.nc.Close()
	}
	c.endLater()
	p.note("ended")
}

// loop waits for parked connections with bytes, until close.
func (p *poller) loop() {
	defer func() {
		if p.ring != nil {
			p.ring.Close()
		}
	}()
	for {
		err := p.setRaw.Read(p.waitFn)
		if err == nil {
			err = p.err
		}
		if err != nil {
			p.mu.Lock()
			closed := p.done // close's, whose error is not os.ErrClosed but the runtime's "use of closed file"
			p.mu.Unlock()
			if !closed {
				p.srv.log.Error("session poller stopped; parked connections are ended", slog.Any(logError, err))
				p.set.Close()
			}
			p.abandon()
			return
		}
		for _, ev := range p.events[:p.nev] {
			p.ready(uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32, ev.Events)
		}
		p.unholdAll()
	}
}

// waitFD takes the events of the set without waiting, and returns false,
// to wait for the set to be readable, when there are none.
func (p *poller) waitFD(epfd uintptr) bool {
	p.nev, p.err = serve.EpollWaitNow(int(epfd), p.events)
	if errors.Is(p.err, syscall.EINTR) {
		p.nev, p.err = 0, nil
		return false
	}
	if p.err != nil {
		p.nev = 0
		return true
	}
	return p.nev > 0
}

// abandon ends every parked connection and parks no more.
func (p *poller) abandon() {
	p.mu.Lock()
	p.done = true
	conns := p.conns
	p.conns = nil
	for _, c := range conns {
		c.parkID = 0
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.nc.Close()
		c.endLater()
	}
}

// ready serves the parked connection of id, which has bytes or has ended;
// events are the set's report of it.
func (p *poller) ready(id uint64, events uint32) {
	p.mu.Lock()
	c := p.conns[id]
	if c == nil {
		p.mu.Unlock()
		return
	}
	c.pollBusy = true
	p.mu.Unlock()
	n, err := p.read(c)
	if errors.Is(err, syscall.EAGAIN) {
		p.idle(c, true)
		return
	}
	if n == 0 {
		// The end of the connection, or its error: it ends here, as its
		// goroutine would after one more read.
		if err != nil {
			c.ended(err)
		}
		c.owesLast = err == nil // its client shut down its writes: it still reads its answers
		p.idle(c, false)
		return
	}
	if err == nil {
		c.sess.live.Load().Touch()
		more := n == len(p.buf) || events&hangup != 0
		if frames, ok := p.answerPings(p.buf[:n]); ok && c.s.leading() && c.sess.sendFirst(c, p.out, frames) {
			if more {
				p.rearm(c, id)
			}
			p.idle(c, true)
			p.note("answered")
			return
		}
		if c.s.loop && wholeFrames(p.buf[:n]) {
			if p.nev > 1 {
				p.hold(c)
			}
			ok := p.serve(c, n)
			if !ok {
				c.unhold() // its GOODBYE, say, before the end
			} else if more {
				p.rearm(c, id)
			}
			p.idle(c, ok)
			p.note("served")
			return
		}
	}
	r := c.r
	p.mu.Lock()
	delete(p.conns, id)
	c.parkID, c.pollBusy = 0, false
	closed := c.closeWanted
	p.mu.Unlock()
	p.remove(c)
	if closed {
		c.endLater()
		p.note("ended")
		return
	}
	r.buf, r.off = append(make([]byte, 0, max(n, initialRead)), p.buf[:n]...), 0
	p.note("unparked")
	if !p.srv.group.Go(func() { c.run(r, false) }) {
		c.nc.Close()
		c.end()
	}
}

// hold holds c's writes until the take's end (conn.hold), lending it a
// buffer of the poller's.
func (p *poller) hold(c *conn) {
	var room []byte
	if k := len(p.rooms); k > 0 {
		room, p.rooms = p.rooms[k-1], p.rooms[:k-1]
	}
	c.hold(room)
	p.held = append(p.held, c)
}

// maxRooms bounds the write buffers the poller keeps to lend: one for
// each connection a take can find ready.
const maxRooms = 256

// unholdAll writes the answers held in this take, and takes back the
// buffers it lent.
func (p *poller) unholdAll() {
	if p.ring != nil && len(p.held) > 1 {
		p.unholdRing()
		return
	}
	for i, c := range p.held {
		p.giveBack(c.unhold())
		p.held[i] = nil
	}
	p.held = p.held[:0]
}

// giveBack keeps room, a connection's spare write buffer, to lend again.
func (p *poller) giveBack(room []byte) {
	if room != nil && cap(room) <= maxPooled && len(p.rooms) < maxRooms {
		p.rooms = append(p.rooms, room[:0])
	}
}

// unholdRing is unholdAll with the answers of the connections held
// sent in one call of the ring (serve.SendRing): a write on loopback
// wakes the client it answers, and a client on the server's processors
// then took the poller's thread away on its way back from each write.
// A connection whose answers carry a pushed frame is written as before,
// with an ordinary call (serve.NowWriter.WritePush), and so is one whose
// writes went to a drainer meanwhile. Each connection of the call keeps
// its wmu from before the call to after it, so what others send it
// meanwhile waits behind what it held.
func (p *poller) unholdRing() {
	for i, c := range p.held {
		p.held[i] = nil
		c.wmu.Lock()
		if !c.held {
			c.wmu.Unlock()
			continue
		}
		rc := c.now.Raw()
		if c.heldPush || rc == nil || c.dead || c.drainer || len(c.wbuf) == 0 {
			c.wmu.Unlock()
			p.giveBack(c.unhold())
			continue
		}
		c.held = false
		p.batch = append(p.batch, ringItem{c: c, rc: rc, fd: -1})
	}
	p.held = p.held[:0]
	if len(p.batch) == 0 {
		return
	}
	p.cur = 0
	p.chain()
	for i := range p.batch {
		it := &p.batch[i]
		c := it.c
		if c.wrote(c.wbuf, c.wframes, it.n, it.err) {
			p.cuts = append(p.cuts, c)
		}
		room := c.spareRoom()
		c.wmu.Unlock()
		p.giveBack(room)
		p.batch[i] = ringItem{}
	}
	p.batch = p.batch[:0]
	for i, c := range p.cuts {
		c.close()
		p.cuts[i] = nil
	}
	p.cuts = p.cuts[:0]
}

// chain holds the descriptor of each connection of the batch from
// batch[p.cur] on, each inside the raw write of the one before (so that
// none can be closed, and its number given to another socket, while the
// ring sends to it), and sends once it holds them all. A connection
// whose descriptor cannot be had (it was closed) gets its error.
func (p *poller) chain() {
	for ; p.cur < len(p.batch); p.cur++ {
		it := &p.batch[p.cur]
		if it.err = it.rc.Write(p.linkFn); it.err == nil {
			return // link went on with the rest
		}
	}
	p.fds, p.bufs, p.sent = p.fds[:0], p.bufs[:0], p.sent[:0]
	for i := range p.batch {
		if it := &p.batch[i]; it.fd >= 0 {
			p.fds, p.bufs, p.sent = append(p.fds, it.fd), append(p.bufs, it.c.wbuf), append(p.sent, 0)
		}
	}
	if len(p.fds) > 0 {
		p.note("sending together") // before: once the answers are out, the test may move on
	}
	made, err := p.sendFn(p.fds, p.bufs, p.sent)
	if err != nil {
		p.srv.log.Warn("session poller: io_uring failed; each answer is written with a call of its own from now on",
			slog.Any(logError, err))
		p.ring.Close()
		p.ring = nil
	}
	k := 0
	for i := range p.batch {
		it := &p.batch[i]
		if it.fd < 0 {
			continue
		}
		switch n := p.sent[k]; {
		case k >= made: // not sent: as unhold would
			if it.n, it.err = serve.WriteNow(it.fd, it.c.wbuf); errors.Is(it.err, syscall.EAGAIN) {
				it.n, it.err = 0, nil
			}
		case n >= 0:
			it.n = n
		case syscall.Errno(-n) == syscall.EAGAIN: // full: the drainer writes it
		default:
			it.err = syscall.Errno(-n)
		}
		k++
	}
	clear(p.bufs)
}

// link is the body of one connection's raw write in chain: it holds the
// descriptor, fd, and goes on with the next connection.
func (p *poller) link(fd uintptr) bool {
	p.batch[p.cur].fd = int(fd)
	p.cur++
	p.chain()
	return true
}

// idle leaves c parked after the poller served it, or ends it when it
// must not go on (ok false, or closed meanwhile).
func (p *poller) idle(c *conn, ok bool) {
	p.mu.Lock()
	c.pollBusy = false
	if ok && !c.closeWanted {
		p.mu.Unlock()
		return
	}
	p.drop(c)
}

// read reads what c has, once, without waiting. Errors: the read's
// (syscall.EAGAIN: nothing after all), or the connection's closing.
func (p *poller) read(c *conn) (n int, err error) {
	if err := c.raw.Read(p.readFn); err != nil {
		return 0, err
	}
	n, err = max(p.n, 0), p.err
	p.err = nil
	return n, err
}

// readFD is the body of read: it never waits.
func (p *poller) readFD(fd uintptr) bool {
	for {
		p.n, p.err = serve.ReadNow(int(fd), p.buf[:])
		if !errors.Is(p.err, syscall.EINTR) {
			return true
		}
	}
}

// wholeFrames reports whether b is whole frames, by their heads alone,
// none of them a CLOSE: what the poller may serve itself (Config.EventLoop).
// A frame whose head is wrong (a length out of range) counts as whole: the
// connection's handling refuses it as its goroutine would.
func wholeFrames(b []byte) bool {
	for len(b) > 0 {
		if len(b) < 5 { // the length and the type
			return false
		}
		size := int(binary.BigEndian.Uint32(b))
		if size < frameHeader || size > MaxFrame {
			return true
		}
		if len(b) < 4+size || Type(b[4]) == TypeClose {
			return false
		}
		b = b[4+size:]
	}
	return true
}

// serve handles the n bytes read for c, whole frames (wholeFrames), as
// c's goroutine would (conn.batch): their answers leave in one write that
// never waits. It reports whether c goes on. The frame's fields and the
// bytes are the poller's, lent to c's reader for the batch.
func (p *poller) serve(c *conn, n int) bool {
	r := c.r
	r.buf, r.off = p.buf[:n], 0
	r.f, p.f = p.f, Frame{}
	ok, _, _ := c.batch(r)
	p.f, r.f = r.f, Frame{}
	r.buf, r.off = nil, 0
	return ok
}

// answerPings reports whether b holds whole PING frames without fields
// and nothing else, and puts their OKs in p.out: the answer the
// connection's goroutine would give (conn.handle) when this node leads.
// It returns their number.
func (p *poller) answerPings(b []byte) (frames int, ok bool) {
	p.out = p.out[:0]
	for len(b) > 0 {
		n, err := ParseFrame(b, &p.f)
		if err != nil || p.f.Type != TypePing || len(p.f.Fields) > 0 {
			return 0, false
		}
		p.out = okFrame(p.out, p.f.ID)
		frames++
		b = b[n:]
	}
	return frames, true
}
