package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/locking-center/locking-center/internal/serve"
)

// forwardRetry is how often Forward looks again for a leader while none
// is known, or dialling it failed.
const forwardRetry = 20 * time.Millisecond

// msgNotForwarded is logged when a v1 request goes unanswered because
// every dial of the leader's mutex port failed for ForwardTimeout: the
// leader is unreachable at its client address, or, under TLS, its
// certificate or this node's is refused.
const msgNotForwarded = "v1 request not forwarded: dialling the leader's mutex port failed"

// answerFailed is v1's answer "failed" (docs/protocol.md).
const answerFailed = '-'

// Removed reports whether this node was removed from its cluster (see
// removed); false before Start. mutex.Node.Removed asks it, so that the
// session server can tell its clients.
func (c *Cluster) Removed() bool { return c.raft != nil && c.removed() }

var _ interface{ Removed() bool } = (*Cluster)(nil) // for mutex.Node.Removed

// removed reports whether this node was removed from its cluster: raft
// shut down while the node was not closing (a leader removed), or the
// latest configuration no longer holds this node, which an earlier one
// did (a follower gets the entry that removes it before the leader stops
// sending it entries). A node that waits to be added, or takes the log
// before the entry that adds it, has not been removed.
func (c *Cluster) removed() bool {
	select {
	case <-c.quit:
		return false
	case <-c.raftDone:
		return true
	default:
	}
	return !c.inConfiguration() && c.wasMember.Load()
}

// inConfiguration reports whether the latest configuration holds this
// node, and notes it in wasMember when it does.
func (c *Cluster) inConfiguration() bool {
	servers, err := c.configuration()
	if err != nil {
		return false
	}
	if _, ok := server(servers, c.cfg.NodeID); ok {
		c.wasMember.Store(true)
		return true
	}
	return false
}

// Forward serves a v1 connection of the mutex port that reached this node
// while it does not lead (oneshot.ServerConfig.Forward): got holds the
// bytes read so far. It dials the leader's mutex port, writes got, and
// then copies bytes both ways, unchanged, until both sides have ended, so
// that an unmodified client behind any node's address is served by the
// leader. How each side ends is passed on: a clean end of stream as a
// half-close (a parked client that leaves withdraws its request; a
// granted client that closes keeps its grant), a reset as a reset (a '+'
// the client never read passes the key on, as it does without a proxy).
//
// With Config.TLS the leader's mutex port is dialled under TLS
// (PeerTLS.Leader): the client's bytes travel encrypted both ways.
//
// It waits for a leader, and retries a dial that fails, for at most
// Config.ForwardTimeout; then it returns with the connection unanswered,
// and the client asks again (a warning names the last dial's error when
// a leader was known but could not be dialled). It returns false, having read and written
// nothing, when this node has become the leader meanwhile: the caller
// serves the request itself. A node removed from its cluster forwards
// nothing: from the moment it knows (see removed), it answers v1's failed
// byte, '-'.
func (c *Cluster) Forward(conn net.Conn, got []byte) bool {
	deadline := time.Now().Add(c.cfg.ForwardTimeout)
	var dialErr error  // the last dial of the leader that failed
	var dialled string // the leader's address it dialled
	for {
		if c.node.IsLeader() {
			return false
		}
		if c.removed() {
			conn.Write([]byte{answerFailed})
			return true
		}
		if addr := c.Leader(); addr != "" && addr != c.cfg.ClientAddress {
			up, err := c.dialLeader(addr, max(time.Until(deadline), forwardRetry))
			if err == nil {
				// A client that timed out waiting for an answer (a
				// leader paused, an election) has moved on, and may
				// have reset its source and locked the key again
				// through another node; its unlock or reset, delivered
				// now, would end that newer grant, and its lock would
				// be granted to nobody.
				if serve.PeerGone(conn) {
					up.Close()
					c.log.Debug("v1 request not forwarded: its client left first",
						slog.String(logRemote, conn.RemoteAddr().String()))
					return true
				}
				proxy(conn, up, got)
				return true
			}
			c.log.Debug("dialling the leader failed", slog.String(logLeader, addr), slog.Any(logError, err))
			dialErr, dialled = err, addr
		}
		if time.Now().After(deadline) {
			if dialErr != nil {
				c.log.Warn(msgNotForwarded, slog.String(logRemote, conn.RemoteAddr().String()),
					slog.String(logLeader, dialled), slog.Any(logError, dialErr))
				return true
			}
			c.log.Debug("no leader to forward to", slog.String(logRemote, conn.RemoteAddr().String()))
			return true
		}
		select {
		case <-time.After(forwardRetry):
		case <-c.quit:
			return true
		}
	}
}

// dialLeader dials the leader's mutex port at addr within timeout, under
// TLS with Config.TLS (the handshake included), and verifies that the
// leader's certificate names addr's host.
func (c *Cluster) dialLeader(addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.dialNode(ctx, addr, addr, true)
}

// proxy writes got to up, then copies each way until both have ended, and
// closes up.
func proxy(client, up net.Conn, got []byte) {
	defer up.Close()
	if _, err := up.Write(got); err != nil {
		abort(client)
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { pipe(up, client) })
	pipe(client, up)
	wg.Wait()
}

// pipe copies src to dst until src ends: a clean end is passed on as a
// half-close of dst, anything else (a reset, a cut) as a reset of dst,
// but for this node closing src itself (it is shutting down): that is
// passed on as a clean end. A reset would tell the leader that a '+' it
// sent was never read, and it would take the key back from a client that
// may have read it; a clean end keeps the grant, and a client that did
// not read its '+' asks again, as after any answer that never came.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		abort(dst)
		return
	}
	if closeWrite(dst) == nil {
		return
	}
	dst.Close()
}

// closeWrite half-closes c: a TCP connection's write side, or under TLS
// the write side of the connection beneath it (without a close_notify;
// the peer reads an end of stream as it would from its client), once
// what was written to it is on its way.
func closeWrite(c net.Conn) error {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// abort ends c with a reset.
func abort(c net.Conn) {
	if tc, ok := serve.Socket(c).(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
