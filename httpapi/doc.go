// Package httpapi is the HTTP front end of Locking-Center: a JSON API for
// locks (acquire, release, renew, heartbeat), a listing of the table, a
// Server-Sent Events stream of what the table does, health probes and a
// status page, all over one mutex.Node shared with the other front ends.
// docs/http.md documents every endpoint with an example.
//
// # Clients are sessions
//
// A request that names a client_id belongs to that client's session of
// the lock table, opened on its first request with the TTL of
// Config.SessionTTL (5 s by default). Heartbeats, and every request that
// names the client_id, keep the session alive; a session not heard from
// for its TTL expires, and every lock it holds ends (an expired event).
// A request without a client_id belongs to the front end's anonymous
// session, which the server keeps alive itself: its locks end when they
// are released or their lease (duration_ms) runs out.
//
// The session name is the client_id; every lock's owner is the request's
// owner, which is also the holder's source (what a reset by source
// matches). The same owner in the same session taking a key it holds
// counts up (reentrancy) unless the request says reentrant false.
//
// # Authentication and limits
//
// With Config.Tokens every request under /api/ carries a token
// (Authorization: Bearer, or X-API-Key); without a valid one it is
// answered 401, the same for a missing and an unknown token. A client
// principal may use the keys of its prefixes only (403), and its listings
// show those keys and its own sessions. Client_ids are scoped by
// principal: the session of a client_id is the pair's, and so is the
// anonymous session, one a principal; each is charged to its principal
// (without authentication, a client's session to the client's IP
// address). A token in the query string is answered 400 on every path,
// and never read. Config.Rates limits each account's requests (429,
// Retry-After). /healthz, /readyz and the status page need no token.
//
// # Waiting
//
// An acquire without wait_ms (or with 0) is a try: a held key answers 409
// at once. With wait_ms the request parks in the key's queue, the same
// FIFO queue as v1 and session-protocol requests, for at most wait_ms
// (measured by the server), and the HTTP request is answered when the
// key is granted (200), the wait runs out (409) or the request is
// withdrawn (409). A client that goes away while it waits is withdrawn;
// a grant that raced its departure is released.
//
// # Events
//
// Every event of the table (acquired, released, expired, reset,
// withdrawn, deadlock) gets an id and goes into a bounded ring and to the
// stream's subscribers. The node's observer only copies the event, as the
// table made it, into the ring, under the node's lock and with no lock of
// its own; with nobody subscribed that is all, and no event is formatted.
// While there are subscribers one goroutine formats the new events (an
// append-style writer of the same JSON as encoding/json's) and hands them
// to each subscriber's queue, so nothing a subscriber does can slow a
// lock; a resume with Last-Event-ID formats what it is owed from the ring.
// A subscriber whose queue is full is dropped: its stream ends, and it may
// reconnect with Last-Event-ID to resume from the ring.
//
// # Life cycle
//
// New builds a Server from a Config; Handler returns its http.Handler
// (wrapped by Config.Middleware), Serve serves it on a listener, Shutdown
// stops gracefully (waiting requests are answered 503 and withdrawn,
// streams end, requests in flight finish), Close stops at once. Close and
// Shutdown are safe to call more than once.
package httpapi
