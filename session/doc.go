// Package session serves the session protocol (v2) of the mutex port:
// long-lived connections that carry a session, many requests at once,
// leases and fencing tokens. docs/protocol.md gives the bytes.
//
// The mutex port's server (package oneshot) hands over every connection
// that begins with the preface's first byte; Server.Serve reads the
// preface, opens or resumes the session, and then reads frames in one
// goroutine per connection. Each request becomes a command of the lock
// table (package mutex) applied through the node; its result, and every
// event about the session, reach the session's route (sess) in the order
// the node made them, and leave as frames in that order. A request that
// waits for a key costs a queue entry and nothing else: no goroutine.
//
// Writes never block the goroutine that makes them: a frame is written
// with a non-blocking write, and what the socket does not take goes to a
// goroutine that writes it under the header timeout; over TLS the mutex
// port's connection does the same under the TLS layer (see
// serve.Server.UseTLS). The answers to the
// frames of one read leave in one write. A frame that reports a change
// (a grant, a release) leaves only once the change is durable.
//
// A session outlives its connections: when one drops, what is owed to the
// client waits for a RESUME on another connection within the session's
// TTL; a session that is not heard from for its TTL expires in the node.
package session
