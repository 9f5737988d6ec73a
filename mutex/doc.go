// Package mutex is the lock table of Locking-Center: what a lock means,
// with no sockets and no bytes. Front ends (the v1 port in oneshot, the
// session protocol in session, the management port) translate requests
// into Commands and results and events back into answers.
//
// # The table is a state machine
//
// Table takes one Command at a time. A command carries its own time (At):
// the table never reads a clock, so the same commands applied in the same
// order to two empty tables leave them equal, down to fencing tokens,
// ids and the order of events. The write-ahead log journals exactly the
// commands that changed the table and rebuilds it by applying them again;
// a replicated log can feed the same commands to several tables. Export
// and Import write and read the table's whole state, for compaction.
//
// What the table keeps:
//
//   - Keys. A key with holders, waiters or a lock-delay has an entry; any
//     other key is absent, so millions of distinct keys over time cost
//     nothing.
//   - Holders. Each lock has a fencing token, strictly greater than every
//     token before it; the owner's source and remote address; its grant
//     time; for a session's lock its mode, reentrancy count, lease and
//     lock-delay. A v1 holder belongs to no session.
//   - The queue of each key: parked requests in arrival order. The table
//     serves the best of them (highest priority after aging, earliest
//     among equals) while it fits beside the holders, and stops at the
//     first that does not, so a waiting writer holds back readers that
//     came after it.
//   - Sessions: name, TTL, the SHA-256 of the resume secret, what each
//     holds and waits for, and the highest request id applied (requests
//     at or below it are duplicates and change nothing).
//   - Deadlines: of leases, lock-delays and waits, in one heap. A tick
//     applies those that are due.
//
// # Modes
//
// Exclusive locks have one holder; with Limit N above one a key is a
// semaphore of N exclusive holders, and every request for it must name
// the same N. Shared locks have any number of shared holders and no
// exclusive one. A Reentrant acquire by a session (and Owner) that holds
// the key counts up and gets the same token; each release counts down. A
// shared holder asking for the key exclusively is refused (two upgraders
// would deadlock). Before an acquire parks, the table looks for a cycle in
// the wait-for graph of (session, owner) nodes and refuses the acquire
// with StatusDeadlock instead of parking it.
//
// # The node
//
// Node serialises commands over one Table: it stamps them with its clock,
// expires sessions that have not been heard from for their TTL before it
// applies anything else (so no parked request is granted to a session
// that has already expired), journals every command that changed the
// table, sets a timer for the next deadline, and delivers the table's
// events, after releasing its lock, to the Waker of a parked v1 request or
// to the Route of a session. Keepalives only touch a session's Live;
// expiring it is a command like any other. Likewise no parked request is
// granted to a client that the node can already know has left: before a
// command that may pass a key on, the node asks the probes front ends gave
// (ApplyWatched) of the requests that command would grant, and applies a
// cancel of each whose client left first (see gone.go).
package mutex
