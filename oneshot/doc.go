// Package oneshot serves protocol v1 of the mutex port: one request and
// one answer per connection, the protocol every Locking-Center client
// speaks. It translates each request into a command of the lock table
// (package mutex) and the table's result into a one-byte answer.
//
// # Wire format
//
// A connection carries exactly one request and one answer. Strings are
// length-prefixed: one length byte, then that many bytes, taken as they are
// (no encoding check, no trimming). A key is 1..127 bytes; a source is
// 0..127 bytes, where 0 asks the server to use the peer's IP address.
//
//	action  byte  layout                          answers
//	lock     1    [1][n][key n][m][source m]      '+' once granted (may block)
//	unlock   2    [2][n][key n]                   '+'; '-' when a session holds the key
//	reset    3    [3][n][key n]                   '+'
//	resetsrc 4    [4][m][source m]                '+'
//	trylock  5    [5][n][key n][m][source m]      '+' granted, '#' held by another
//
// Any request may also be answered '-': malformed, rejected, or withdrawn.
// An unknown action byte, a key length of 0 or 128..255, a source length of
// 128..255, or bytes after a complete request make a request malformed; it
// is answered '-' and the connection is closed. A connection whose first
// byte is the session protocol's (ServerConfig.Handoff) goes to that
// protocol's server instead.
//
// The request must arrive whole within ServerConfig.HeaderTimeout. A lock
// request that cannot be granted at once parks in its key's queue with no
// timeout. While it is parked the server watches the connection: end of
// stream, an error or any further byte withdraws the request. Before the
// key is passed to a parked request, the node looks whether its
// connection's end is already on the socket (serve.PeerGone), or its
// worker's read met it: a request whose client left is withdrawn then,
// unanswered, and the key goes to the next in line. A grant whose '+'
// cannot be written, or whose peer is found gone, is revoked and passes
// on.
//
// # Serving a connection
//
// Listen defers accepts until a request's bytes have arrived (Linux's
// TCP_DEFER_ACCEPT). The accept loop then reads the request without
// waiting, applies it to the node, and, when the answer needs no waiting
// (an unlock, a free key, a busy try-lock), writes the answer too: most
// connections are served start to end by the accept loop, in the order
// they reached the server, with no goroutine handed anything. A parked
// request, a grant waiting for the journal, and a request whose bytes are
// still on their way go to a pool of worker goroutines; such a request
// enters the table when its worker has read it whole, which can be a few
// microseconds after a request that arrived whole just after it.
//
// # Who closes first
//
// Every answer leaves with the end of our side of the connection, in one
// segment (serve.WriteLast: on Linux the answer is sent with MSG_MORE and
// the half-close that follows at once adds the FIN to it; under TLS the
// socket is corked for the answer's record and the close_notify, which
// only a grant goes without). A client reads its answer
// and closes, and by then our end has arrived: its close is the second,
// and the TIME_WAIT that TCP keeps for a minute on the side that closes
// first stays on the server's host, one per connection, behind the
// listening port, instead of taking an ephemeral port of the client's
// host each time. The bytes are those of a close right after the answer.
//
// A grant is delivered by writing '+' and ending our side of the
// connection that way. The connection then stays open, with no goroutine
// on it, until the client ends its side; every 10 ms a timer reads the
// TCP state of these connections without waiting. A clean end keeps the
// grant; a reset means the '+' was never read, and the grant is revoked.
// An unlock of the key closes its pending connection at once. When a
// parked request is granted, the goroutine that released the key writes
// the '+' and ends our side itself, so the handoff waits for no other
// goroutine; the waiter's goroutine, woken from its read, leaves the
// connection to the timer. (Its reads must stop first: a read that meets
// the client's reset takes the socket error, and then answers for the
// grant itself.)
//
// # TLS
//
// With ServerConfig.TLS the same bytes travel inside TLS. A connection
// then goes to a worker at once: its handshake and its request must
// arrive within the header timeout, and the accept loop does no TLS work.
// What the server learns from the socket it reads under TLS: a parked
// request is withdrawn when the client closes; after a grant's '+' the
// server half-closes the TCP connection (sending no close_notify, which a
// client that reads one byte would leave unread) and reads the socket's
// TCP state as above. A client that reads its '+' and closes ends
// cleanly, its close_notify included; one that closes with the '+' record
// unread resets the connection, and the grant passes on.
//
// docs/protocol.md describes the same bytes for client authors.
package oneshot
