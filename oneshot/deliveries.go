package oneshot

import (
	"net"
	"sync"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// deliveryTick is how often the connections of delivered grants are
// checked for the client's answer.
const deliveryTick = 10 * time.Millisecond

// delivery is a grant whose '+' was written and our side of the
// connection ended, waiting for the client to end its side.
type delivery struct {
	c     net.Conn
	grant grant
	born  uint64 // sweep count when it was added
	next  uint64 // sweep count of its next check
}

// deliveries learns, for each grant delivered, whether its '+' reached the
// client's program (see peerAnswer), without a goroutine per grant: the
// connection stays open after the '+', and while any are pending a timer
// sweeps them every deliveryTick with a non-blocking read of their TCP
// state. A connection is checked at the first sweep after it was added,
// then at intervals that double, so a client that keeps its connection
// open until the header timeout costs a handful of checks. A grant not
// received is released, so the key passes on. A grant released first (its
// holder unlocked, the usual case) needs no answer: its connection is
// simply closed.
type deliveries struct {
	node    *mutex.Node
	timeout time.Duration // how long a client may keep the connection open
	finish  func(net.Conn)
	onLost  func(grant) // a grant found not received, after its revoke

	mu      sync.Mutex
	pending map[uint64]delivery // by fencing token
	sweeps  uint64
	timer   *time.Timer // runs sweep deliveryTick after it is armed
	armed   bool        // the timer is set
	stopped bool        // stop was called
	batch   []delivery  // sweep's buffer, reused
	sweepMu sync.Mutex  // held while a sweep runs
}

func newDeliveries(n *mutex.Node, timeout time.Duration, finish func(net.Conn), onLost func(grant)) *deliveries {
	return &deliveries{
		node:    n,
		timeout: timeout,
		finish:  finish,
		onLost:  onLost,
		pending: make(map[uint64]delivery),
	}
}

// add leaves c, whose grant g has had its '+' and our FIN, until the
// client's answer.
func (d *deliveries) add(c net.Conn, g grant) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending[g.token] = delivery{c: c, grant: g, born: d.sweeps, next: d.sweeps + 1}
	d.armLocked()
}

// armLocked sets the timer for the next sweep unless it is set. No
// goroutine waits for deliveries: the timer starts one when it fires.
func (d *deliveries) armLocked() {
	if d.armed || d.stopped {
		return
	}
	d.armed = true
	if d.timer == nil {
		d.timer = time.AfterFunc(deliveryTick, d.tick)
	} else {
		d.timer.Reset(deliveryTick)
	}
}

// tick sweeps, and sets the timer again while deliveries are pending.
func (d *deliveries) tick() {
	d.sweepMu.Lock()
	defer d.sweepMu.Unlock()
	d.mu.Lock()
	d.armed = false
	stopped := d.stopped
	d.mu.Unlock()
	if stopped {
		return
	}
	if d.sweep() > 0 {
		d.mu.Lock()
		d.armLocked()
		d.mu.Unlock()
	}
}

// stop ends the sweeps, waiting for one under way; pending deliveries are
// left as they are (the caller cuts their connections).
func (d *deliveries) stop() {
	d.mu.Lock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
	d.sweepMu.Lock()
	d.sweepMu.Unlock()
}

// take removes and returns the connection of grant token id, ended before its
// client answered; the caller finishes it.
func (d *deliveries) take(id uint64) (net.Conn, bool) {
	if id == 0 {
		return nil, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.pending[id]
	if ok {
		delete(d.pending, id)
	}
	return p.c, ok
}

// sweep settles every pending delivery whose client has answered, or that
// has waited longer than the timeout, and returns how many are left.
func (d *deliveries) sweep() int {
	d.mu.Lock()
	d.sweeps++
	now := d.sweeps
	expired := uint64(d.timeout/deliveryTick) + 1
	batch := d.batch[:0]
	for id, p := range d.pending {
		if now >= p.next || now-p.born >= expired {
			batch = append(batch, p)
			p.next = now + (now - p.born)
			d.pending[id] = p
		}
	}
	d.mu.Unlock()
	for i, p := range batch {
		settled, received := peerAnswer(p.c)
		if !settled && now-p.born >= expired {
			settled, received = true, acknowledged(p.c)
		}
		if settled && d.settle(p, received) {
			d.finish(p.c)
		}
		batch[i] = delivery{}
	}
	d.mu.Lock()
	d.batch = batch[:0]
	left := len(d.pending)
	d.mu.Unlock()
	return left
}

// settle ends the delivery p unless take got there first, and reports
// whether it did; a grant not received is released.
func (d *deliveries) settle(p delivery, received bool) bool {
	d.mu.Lock()
	q, ok := d.pending[p.grant.token]
	ok = ok && q.c == p.c
	if ok {
		delete(d.pending, p.grant.token)
	}
	d.mu.Unlock()
	if ok && !received {
		d.node.Revoke(p.grant.key, p.grant.token)
		d.onLost(p.grant)
	}
	return ok
}
