// Package store is the write-ahead log behind DATA_PATH: it keeps a lock
// table on disk (held keys, sessions, leases, the fencing token
// high-water mark) so that it survives a restart.
//
// A Log implements mutex.Journal. The node hands it every command that
// changed the table, in the order the table applied them; the Log appends
// one record per command to a single file and reports, through the Pending
// it returned, when the command is on disk. Open reads the file back and
// returns the table the commands rebuild.
//
//	l, table, err := store.Open(store.Config{Path: "/var/lib/locking-center/locks.wal"})
//	...
//	node := mutex.NewNode(mutex.NodeConfig{Journal: l, Table: table})
//	...
//	l.Close()
//
// # Record format
//
// The file is a sequence of records and nothing else: no file header, no
// padding. Each record is a 12-byte header followed by a payload:
//
//	offset  size  field
//	0       4     n: payload length in bytes, little-endian uint32, 1..MaxPayload
//	4       4     CRC32C of bytes 0..3 (guards the length before it is trusted)
//	8       4     CRC32C of the n payload bytes
//	12      n     payload: the JSON of one command or snapshot record
//
// Both checksums use the Castagnoli polynomial. The length has a checksum of
// its own so that a damaged length is caught as damage, rather than taken
// for a record that runs past the end of the file (which would look like a
// torn write and be dropped along with every record after it).
//
// The payload is one flat JSON object. Its "op" says what it is:
//
//   - a command of the table, op being the command's name (mutex.Op's
//     String): acquire, release, renew, cancel, revoke, reset-key,
//     reset-source, open-session, close-session, expire-session, tick,
//     restart. "at" is the command's time in Unix nanoseconds; the other
//     fields are those of mutex.Command the command uses;
//   - a record of a snapshot, written by compaction: state (the counters
//     of fencing tokens, tickets and sessions), session, key (a limit or a
//     lock-delay), holder, waiter;
//   - grant, the record of a v1 grant as logs before fencing tokens wrote
//     it; such logs replay as they always did.
//
// A v1 lock that was granted at once is this record:
//
//	{"op":"acquire","at":1709294400123456789,"key":"b3JkZXJzL2JhdGNoLTc=",
//	 "src":"MTAuMC4wLjQ=","addr":"MTAuMC4wLjQ6NTEzMTQ=","conn":true}
//
// and its unlock
//
//	{"op":"release","at":1709294401123456789,"key":"b3JkZXJzL2JhdGNoLTc="}
//
// Field names: key, src (source), acct (the account charged for a lock, a
// waiter or a session), addr (remote address), owner, note (the holder's
// note of a session's acquire, up to 1 KiB), name (a session's) and secret (the SHA-256 of a session's resume secret) are byte strings
// in standard base64 with padding (RFC 4648 section 4), so that any byte
// sequence, including invalid UTF-8, NUL and 0xFF, comes back exactly;
// sess, req, target, ticket, token, floor, before (the bound of a v1
// release or a reset: it ends only grants of lower tokens), count, limit,
// applied, sessions, maxh and maxp (an acquire's caps of its account) are unsigned
// integers; at, wait, lease, delay, ttl (durations
// in nanoseconds), mode, prio, opened, lease_at, delay_at, wait_at (times
// in Unix nanoseconds) are integers; try, reent, conn are booleans. A
// field at its zero value is left out. A reader accepts the fields in any
// order and ignores fields it does not know; it refuses an op it does not
// know, a command without a time (a release of the older format, which
// had none, is applied at time zero), a missing key where the op needs
// one, a value out of range, and a payload that is not such an object.
//
// # Replay
//
// Open reads the records from the start and applies them to an empty
// table: first the records of a snapshot, when the file begins with one,
// imported as they are; then every command applied again, in order. The
// table is a deterministic state machine (see package mutex), so it comes
// back as it was, fencing tokens included. A snapshot record after a
// command is corruption. A grant of the older format makes its key's v1
// holder (a later grant of the same key wins), with the next fencing
// token.
//
// A crash while a batch is being written can damage only the end of the
// file, because nothing is written after a batch until that batch is synced
// (see Group commit). Replay therefore tells a torn tail from corruption by
// where the damage lies:
//
//   - Fewer than 12 bytes left, or a header whose checks pass but whose
//     payload runs past the end of the file: a torn tail.
//   - A record that fails a check (length checksum, length range, payload
//     checksum, JSON) where the run of zero bytes that ends the file begins
//     inside that record or before it: a torn tail. This is the file whose
//     size reached the disk before its data did.
//   - Any other record that fails a check: corruption. It is whole, so it was
//     written and synced; a checksum that fails now means the disk or
//     something else changed it.
//
// A torn tail was never acknowledged. Open truncates the file to the end of
// the last whole record and syncs it before anything is appended, and logs
// how many bytes it dropped. Corruption refuses the start: Open returns a
// *CorruptError that names the file and the offset of the bad record, and
// changes nothing on disk. A hole of zeros inside the last, unsynced write
// that is followed by data that did reach the disk counts as corruption
// too. It is rare (out-of-order writeback of an append), and refusing is the
// safe choice: dropping records past damage that might not be a torn write
// could lose an acknowledged grant and hand a key out twice. An operator who
// knows the process crashed can truncate the file at the reported offset.
//
// Before a length is used to read a payload it is checked against
// MaxPayload and against the bytes left in the file, so a damaged length
// never makes replay allocate or read more than the file holds.
//
// # Group commit
//
// Append runs under the table's lock and does no I/O. It encodes the record
// into the batch being filled, in memory, and returns that batch as the
// change's Pending. One writer goroutine, owned by the Log and stopped by
// Close, takes the whole batch at once, writes it at the end of the log with
// one write, syncs it with one fsync, and then completes the batch: every
// Pending of it returns together. While it writes and syncs, new changes
// fill the next batch. Batches are written strictly in order and each is
// synced before the next is written, so the file is always a prefix of the
// history the table made, and a crash at any instant leaves at most the one
// unsynced batch damaged.
//
// When the last batch held more than one change, changes are arriving
// concurrently, and the writer lets the next batch gather before it takes
// it: it waits while changes keep coming, until none has come for twice
// the mean gap between the changes of the last batch, or for as long as
// the last write and fsync took (at most 2 ms). With a fast disk and many
// clients this about doubles the changes each fsync carries, which spends
// less of the machine on fsyncs; with a slow disk every client is already
// waiting in the batch and the wait ends after one short gap; a lone client
// never waits.
//
// A front end answers a grant only after its Pending returned nil. A
// release that passes the key to the next waiter is one command, so the
// release and the new holder's grant become durable together.
//
// # Write failures
//
// When the write or the fsync of a batch fails, every Pending of the batch
// returns an error wrapping mutex.ErrJournal, and the counter
// locking_center_store_write_errors_total goes up by the number of commands
// the batch took from Append (commands carried over from an earlier
// failure, see below, are not counted twice). The front ends answer a
// failed grant as failed ('-' on v1) and revoke it; a failed release has
// already taken effect in the table and stays so.
//
// After a failed write or fsync the state of the file past the last synced
// batch is unknown: part of the batch may be on disk, and after a failed
// fsync the kernel may have dropped the dirty pages or marked them clean, so
// a later fsync would not write them and a retried fsync proves nothing.
// Appending the next batch after such bytes could leave a hole of stale or
// zero bytes in the middle of the file, which replay would rightly call
// corruption. So before anything else is appended the Log puts the file back
// into a known state, in this order:
//
//  1. Truncate the file to the end of the last synced batch and fsync it.
//     Bytes before that offset were synced earlier and are not touched by
//     the failed write (the shared last page holds the same bytes in the
//     page cache as on disk), so the file is exactly the synced prefix.
//  2. If that fails, rewrite the log as a compaction does (below), from the
//     table that the synced prefix replays to. The new file does not depend
//     on anything the failed write left behind.
//  3. If that fails too, the Log stays broken: every later batch first tries
//     1 and 2 again and, while they fail, fails as a whole without writing.
//     No change is ever written after bytes of uncertain state.
//
// The commands of a failed batch are not dropped: the table has applied
// them already, and every later command was applied after them, so they
// are carried into the next batch, in front of its own commands, and the
// file stays the table's history in order. A grant among them was answered
// as failed and its front end appends a revoke, which follows it in the
// file. Until the carried commands are written, a restart brings back the
// state before them, which errs on the safe side: a key whose release
// failed comes back held by nobody (cleared by a reset, or by its session's
// end), never a key held twice.
//
// One case remains on the safe side only: if the process dies after the
// carried commands are synced and before the revoke of a failed grant is,
// that grant comes back as held, by a client that was told it failed.
//
// A write or fsync that fails because the volume is full (ENOSPC, or
// EDQUOT: a disk quota is used up) gets one more chance. Once step 1 has
// put the file back to its synced prefix, the Log copies its mirror (see
// Compaction), applies the batch's commands to the copy, carried ones
// first, and rewrites the log from the copy as a compaction does, whatever
// the log's size. The new file is the snapshot of the table after the
// batch: the smallest file that holds it, and one for which the rename
// frees every block of the old log. Then:
//
//   - the rewrite succeeded, directory fsync included: the batch is
//     durable. Its Pendings return nil, nothing is carried, and the copy is
//     the mirror;
//   - it failed before the rename: the batch fails as above and is
//     carried; the old log and the mirror stay;
//   - it failed at the directory fsync after the rename: the new file holds
//     the batch, but the rename is not known to be on disk. The batch
//     fails, the Log is broken (step 1 then includes a directory fsync), the
//     copy is the mirror, and nothing is carried: the file holds the batch
//     already, and writing it again would apply it twice.
//
// The rewrite keeps every guarantee of this section. No Pending of the
// batch has returned before it, so nothing of the batch was acknowledged.
// The new file depends on no byte that the failed write left behind: it is
// written beside the log, synced, renamed into place and its directory
// synced before anything is written after it, like every compaction. A
// crash before the rename leaves the synced prefix, the table before the
// batch; after it, the snapshot, the table after the batch; the table had
// applied the batch already, so either is a state that a prefix of its
// history made, as after an append. The snapshot is of the table the
// synced prefix replays to with the batch applied in order, and the table
// is deterministic, so it replays to exactly what the appended batch would
// have: the same holders, tokens, sessions and counters. Its state record
// carries the fencing token counter, so no token goes back.
//
// A rewrite needs at least one free block, even for a table that holds no
// key: its state record keeps the counters of fencing tokens, tickets and
// sessions, which must survive. On a volume that something else has filled
// to the last block every batch therefore fails, releases included (they
// take effect in the table all the same and are carried), until a block is
// free again; then the first batch that does not fit as an append is
// written by such a rewrite. The Log keeps its own volume from filling up
// while it can compact (see Compaction).
//
// # Compaction
//
// The Log keeps a mirror of the table: after each batch is synced it
// applies the batch's commands to a table of its own, which is therefore
// always the table the synced file replays to. It estimates the size a
// snapshot of that table would take (its records, at the size the last
// compaction measured). After a batch, when the file is at least twice that
// estimate and either at least Config.CompactMinSize or on a volume that
// runs low on space, the writer rewrites it: it writes the mirror's
// snapshot (state, sessions, then key by key its holders and waiters) to
// Path+".tmp", fsyncs it, renames it over Path and fsyncs the directory,
// then appends to the new file. Path here is the resolved path (see One
// process per file), so the rename replaces the log itself, never a
// symbolic link to it. The compaction runs on the writer goroutine between
// two batches, so appends wait for it and no change is lost or reordered. A
// crash before the rename leaves the old log in place; after it, the new
// one; both replay to the same table. A temp file left by such a crash is
// never read: Open removes it. If the directory fsync fails after the
// rename, the Log counts as broken (see Write failures) so that nothing is
// acknowledged from the new file until the rename is known to be on disk.
//
// A volume runs low on space (FS.Free: statfs(2), the blocks that an
// unprivileged process may still use) when the log, from 64 KiB on, takes
// more room than is left, or when what is left would not hold two
// snapshots and a 4 KiB block. Both are for a volume smaller than the
// threshold, or one that fills up: a rewrite needs room for a snapshot
// beside the old log, so it has to run while there is some. The first keeps
// the log no larger than the room left beside it; the second keeps
// room for the rewrite that follows a write on a full volume (see Write
// failures). The Log asks for the free space only when the log may have
// crossed either point since the last answer, that is after growing by a
// quarter of the room that answer left before the nearer one (a snapshot
// grows by about a record when the log does, so no point comes more than
// three times as fast), and again after each compaction: on a roomy volume,
// about once per compaction. A compaction that fails leaves the old log in
// use; it is tried again once the log has grown by the threshold, or, when
// it failed for lack of space, as soon as the free space holds a snapshot
// (the Log then asks after each batch), so that the log does not take the
// room that comes free before it can compact.
//
// Open also compacts, before serving, a log that is at least twice the
// size of its snapshot and at least the threshold or 64 KiB, whichever is
// smaller, so that a restart shrinks a log that a large threshold let grow.
// It logs a warning when the volume has less free space than the
// threshold. locking_center_store_compactions_total counts rewrites,
// including those of a recovery and of a full volume.
//
// # One process per file
//
// Open first resolves Path: it makes it absolute and resolves every
// symbolic link in it (in the file's name when the file exists, otherwise
// in its directory's). Every name of the log that goes through symbolic
// links therefore leads to one path, and the lock file, the temp file and
// the log's messages all use that path. A Path that exists and is not a
// regular file after this (a device such as /dev/null, a named pipe, a
// socket, a directory) is refused with ErrNotRegular, and a symbolic link
// to a missing file with the error of resolving it, both before anything
// is created. A hard link is another name of the same file that no path
// leads back from, so two processes that open the log through two hard
// links are not kept apart.
//
// Open then takes an exclusive flock(2) on Path+".lock", a file beside the
// log that is never renamed (a lock on the log itself would stay with the
// old file at the first compaction), and writes its process id into it. A
// second process that opens the same log, by any such name, gets
// ErrLocked, with the id of the holder when it can be read. The lock ends with the process or with Close.
// The lock file stays on disk; it holds no state.
package store
