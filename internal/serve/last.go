package serve

import (
	"crypto/tls"
	"net"
)

// WriteLast writes b as the last bytes of c and ends c's write side, so
// that b and the end (TCP's FIN) reach the peer together. A peer that
// reads b and then closes finds the end already there, and its close is
// the second: the TIME_WAIT that TCP keeps for a minute on the side that
// closes first stays on this side, behind the listening port, instead of
// taking one of the peer's ephemeral ports each time. With notify, a TLS
// connection sends its close_notify after b, as a Close would; without,
// none (a peer that reads only b would leave it unread).
//
// On Linux b and the end leave in one segment: a plain TCP connection
// sends b with MSG_MORE, which holds it for the FIN; under TLS the socket
// beneath is corked (TCP_CORK) for b's record and the close_notify until
// the FIN sends them. Elsewhere the end follows b on its own. A
// connection that cannot be half-closed (a net.Pipe) is only written.
// Errors: the write's; a half-close that fails (the peer reset the
// connection) is not reported, as with CloseWrite.
func WriteLast(c net.Conn, b []byte, notify bool) error {
	var err error
	if tc, ok := c.(*tls.Conn); ok {
		cork(Socket(tc))
		if _, err = tc.Write(b); err == nil && notify {
			tc.CloseWrite() // the close_notify, held with b
		}
	} else {
		err = writeMore(c, b)
	}
	CloseWrite(c)
	return err
}
