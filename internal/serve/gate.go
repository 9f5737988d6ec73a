package serve

import (
	"net"
	"sync"
	"sync/atomic"
)

// Gate caps the connections open at once across the ports that share it,
// with a share kept back: the client ports' connections (Take(false)) may
// fill only limit−reserved of the slots, the operators' ports' (Take(true))
// any. So a flood of parked clients can never lock the operator out. A nil
// *Gate admits everything.
type Gate struct {
	max, reserved int64
	open, clients atomic.Int64
}

// NewGate returns a gate of limit connections with reserved of them kept for
// operators' ports. limit ≤ 0 means no cap: NewGate returns nil.
func NewGate(limit, reserved int) *Gate {
	if limit <= 0 {
		return nil
	}
	return &Gate{max: int64(limit), reserved: int64(min(max(reserved, 0), limit))}
}

// Take takes a slot and reports whether there was one for a connection of
// an operator's port (operator) or of a client port.
func (g *Gate) Take(operator bool) bool {
	if g == nil {
		return true
	}
	if !operator && g.clients.Add(1) > g.max-g.reserved {
		g.clients.Add(-1)
		return false
	}
	if g.open.Add(1) > g.max {
		g.open.Add(-1)
		if !operator {
			g.clients.Add(-1)
		}
		return false
	}
	return true
}

// Release gives back a slot that Take(operator) took.
func (g *Gate) Release(operator bool) {
	if g != nil {
		g.open.Add(-1)
		if !operator {
			g.clients.Add(-1)
		}
	}
}

// Open returns the connections open now.
func (g *Gate) Open() int {
	if g == nil {
		return 0
	}
	return int(g.open.Load())
}

// Limit makes s take a slot of g for every connection it accepts, as an
// operator's port or a client port; a connection that finds none is given
// to refuse (which may write a short refusal without waiting, and must not
// block), then closed. Call it before Serve.
func (s *Server) Limit(g *Gate, operator bool, refuse func(net.Conn)) {
	s.gate, s.operator, s.refuse = g, operator, refuse
}

// LimitListener returns ln whose Accept takes a slot of g for each
// connection, as an operator's port or a client port, and whose
// connections give it back when closed. A connection that finds no slot is
// given to refuse (it must not block; nil: none), closed, and not
// returned. For listeners served by another package, such as net/http.
func LimitListener(ln net.Listener, g *Gate, operator bool, refuse func(net.Conn)) net.Listener {
	if g == nil {
		return ln
	}
	return &limitListener{Listener: ln, g: g, operator: operator, refuse: refuse}
}

type limitListener struct {
	net.Listener
	g        *Gate
	operator bool
	refuse   func(net.Conn)
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.g.Take(l.operator) {
			return &gatedConn{Conn: c, g: l.g, operator: l.operator}, nil
		}
		if l.refuse != nil {
			l.refuse(c)
		}
		c.Close()
	}
}

// gatedConn gives its slot back once, when it is first closed.
type gatedConn struct {
	net.Conn
	g        *Gate
	operator bool
	once     sync.Once
}

func (c *gatedConn) Close() error {
	c.once.Do(func() { c.g.Release(c.operator) })
	return c.Conn.Close()
}
