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
// stream's subscribers. The node's observer only copies the event into
// the ring; one goroutine formats events and hands them to each
// subscriber's queue, so nothing a subscriber does can slow a lock. A
// subscriber whose queue is full is dropped: its stream ends, and it may
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
