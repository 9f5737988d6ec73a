package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/locking-center/locking-center/internal/serve"
)

// advertised is the raft address the other nodes reach this one at, as
// configured: a host name stays a name, resolved by each dialler when it
// dials, so that a node whose address behind a stable name changes (a
// rescheduled pod) is still found.
type advertised string

func (a advertised) Network() string { return "tcp" }
func (a advertised) String() string  { return string(a) }

// tcpStream is raft's stream layer over the raft port that Start bound.
// The port carries two protocols, told apart by a connection's first
// byte: raft's own RPCs (whose first byte is an RPC type, 0 to 4) and this
// package's control requests (controlByte; see doc.go). Connections of
// raft are handed to raft through Accept; control requests are served by
// control. With TLS, every connection's handshake comes first, in the
// goroutine that sorts it; a handshake that fails (a peer in the clear, a
// certificate no CA of the nodes signed) is logged and the connection
// closed. Without TLS, a connection that begins a TLS handshake (a node
// under TLS) is logged and closed too.
type tcpStream struct {
	ln        net.Listener
	advertise net.Addr
	// dial dials a peer's raft port, under TLS when the port speaks it.
	dial func(ctx context.Context, addr raft.ServerAddress) (net.Conn, error)
	// control serves one control connection, its first byte read.
	control func(net.Conn)
	tls     *tls.Config // nil: plain TCP
	log     *slog.Logger

	// dialled are the connections Dial made that are still open; once cut
	// is set, Dial dials no more (cutDialled).
	dmu     sync.Mutex
	dialled map[*dialledConn]struct{}
	cut     bool

	group     serve.Group
	conns     chan net.Conn
	quit      chan struct{}
	closeOnce sync.Once
	done      chan struct{} // the accept loop ended
}

// firstByteTimeout bounds the wait for a new connection's first byte.
const firstByteTimeout = transportTimeout

// tlsHandshake is the first byte of a TLS connection (a handshake
// record's content type): a node under TLS dialling one in the clear. No
// RPC type of raft and no control request begins with it.
const tlsHandshake byte = 0x16

// newTCPStream starts accepting on ln; with tlsCfg set, every connection
// it accepts speaks TLS with it.
func newTCPStream(ln net.Listener, advertise net.Addr, dial func(context.Context, raft.ServerAddress) (net.Conn, error),
	control func(net.Conn), tlsCfg *tls.Config, log *slog.Logger) *tcpStream {
	s := &tcpStream{ln: ln, advertise: advertise, dial: dial, control: control, tls: tlsCfg, log: log,
		conns: make(chan net.Conn), quit: make(chan struct{}), done: make(chan struct{})}
	go s.acceptLoop()
	return s
}

// acceptLoop accepts connections until the listener closes and sorts each
// by its first byte, in a goroutine of its own.
func (s *tcpStream) acceptLoop() {
	defer close(s.done)
	serve.Accept(s.ln, &s.group, nil, func(c net.Conn) func() {
		return func() { s.sort(c) }
	})
}

// sort reads c's first byte and hands c to raft or to control, after
// its TLS handshake when the port speaks TLS.
func (s *tcpStream) sort(c net.Conn) {
	if s.tls != nil {
		tc := tls.Server(c, s.tls)
		tc.SetDeadline(time.Now().Add(firstByteTimeout))
		if err := tc.Handshake(); err != nil {
			s.log.Warn("raft port: connection refused, its TLS handshake failed",
				slog.String(logRemote, c.RemoteAddr().String()), slog.Any(logError, err))
			c.Close()
			return
		}
		tc.SetWriteDeadline(time.Time{})
		c = tc
	}
	c.SetReadDeadline(time.Now().Add(firstByteTimeout))
	br := bufio.NewReaderSize(c, 64)
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Time{})
	if s.tls == nil && first[0] == tlsHandshake {
		s.log.Warn("raft port: connection refused, it speaks TLS and this node does not: "+
			"the nodes of a cluster all speak TLS to each other (TLS_CERT_FILE, TLS_PEER_CA_FILE) or none does",
			slog.String(logRemote, c.RemoteAddr().String()))
		c.Close()
		return
	}
	pc := &peekedConn{Conn: c, r: br}
	if first[0] == controlByte {
		br.ReadByte()
		s.control(pc)
		c.Close()
		return
	}
	select {
	case s.conns <- pc:
	case <-s.quit:
		c.Close()
	}
}

// Accept returns the next connection of raft's RPCs.
func (s *tcpStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.quit:
		return nil, net.ErrClosed
	}
}

// Close stops accepting, and waits for the connections being sorted and
// the control requests being served.
func (s *tcpStream) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.quit)
		err = s.ln.Close()
		<-s.done
		s.group.Close()
		s.group.Wait()
	})
	return err
}

// Addr returns the address the other nodes reach this one at.
func (s *tcpStream) Addr() net.Addr { return s.advertise }

// Dial dials a peer's raft port, at its Config.Dial address when it has
// one, within timeout (with TLS, the handshake included).
func (s *tcpStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	s.dmu.Lock()
	cut := s.cut
	s.dmu.Unlock()
	if cut {
		return nil, net.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := s.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	dc := &dialledConn{Conn: c, s: s}
	s.dmu.Lock()
	defer s.dmu.Unlock()
	if s.cut {
		c.Close()
		return nil, net.ErrClosed
	}
	if s.dialled == nil {
		s.dialled = make(map[*dialledConn]struct{})
	}
	s.dialled[dc] = struct{}{}
	return dc, nil
}

// cutDialled closes every connection Dial made, and makes Dial refuse
// from now on: a node that stops cuts its RPCs to the other nodes, so that
// none of raft's goroutines waits out its transport timeout (10 s for
// each append in flight) on a peer that takes bytes and answers nothing,
// a host gone or a partition. raft's Shutdown waits for those goroutines.
// (A pipeline whose answers raft no longer reads is drainedPipeline's.)
func (s *tcpStream) cutDialled() {
	s.dmu.Lock()
	s.cut = true
	conns := make([]*dialledConn, 0, len(s.dialled))
	for c := range s.dialled {
		conns = append(conns, c)
	}
	clear(s.dialled)
	s.dmu.Unlock()
	for _, c := range conns {
		c.Conn.Close()
	}
}

// dialledConn is a connection Dial made, forgotten when it closes.
type dialledConn struct {
	net.Conn
	s *tcpStream
}

func (c *dialledConn) Close() error {
	c.s.dmu.Lock()
	delete(c.s.dialled, c)
	c.s.dmu.Unlock()
	return c.Conn.Close()
}

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
