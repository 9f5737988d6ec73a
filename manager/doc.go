// Package manager serves the management port, where lc-cli lists the held
// keys and resets them, and holds the client for it.
//
// # Wire format
//
// One request and one response per connection, framed as on the mutex
// port: a command byte, then length-prefixed strings (one length byte). A
// response starts with one status byte, '+' or '-'; only '+' is followed
// by a body. Integers are big-endian.
//
//	command             byte  request                          body after '+'
//	list keys             1   [1]                              [count u32] count x ([n u8][key n])
//	list holders          2   [2]                              [count u32] count x holder
//	reset key             3   [3][n][key n]                    none
//	reset source          4   [4][m][source m]                 none
//	list holders, tokens  5   [5]                              [count u32] count x holder, extended
//	list sessions         6   [6]                              [count u32] count x session
//	list members          7   [7]                              [count u32] count x member
//	add member            8   [8][n][id][r][raft][c][client][voter u8]  none
//	remove member         9   [9][n][id]                       none
//	transfer leadership  10   [10][n][id] (n 0: any voter)     none
//	list holders, notes  11   [11]                             [count u32] count x holder, with note
//	snapshot             12   [12]                             a snapshot file, to the end of the stream
//
//	holder:   [n u8][key n] [m u8][source m] [r u8][remote r]
//	          [acquired i64: Unix nanoseconds] [held i64: nanoseconds]
//	          [waiters u32]
//	extended: holder, then [token u64] [session u64] [lease i64: ns, -1 none]
//	          [delay i64: ns] [mode u8] [count u32] [limit u32]
//	with note: extended, then [k u16][note k, at most 1,024]
//	session:  [id u64] [m u8][name m] [r u8][remote r] [ttl i64: ns]
//	          [idle i64: ns] [held u32] [parked u32]
//	member:   [n u8][id n] [r u8][raft r] [c u8][client c]
//	          [flags u8: 1 voter, 2 leader, 4 answered]
//	          [state u8: 0 unknown, 1 follower, 2 candidate, 3 leader]
//	          [last contact i64: ns, 0 the leader, -1 unknown] [applied u64]
//
// The membership commands (7 to 10) and the snapshot (12) answer a
// failure with '-', then a code byte (Refusal's codes), a u16 length and
// a message of that many bytes; commands 1 to 6 and 11 answer '-' alone,
// and so does an lcd older than the snapshot asked for one
// (ErrNoSnapshots). A snapshot file is what store.WriteSnapshotFile
// writes: the records of a compacted write-ahead log and an end record
// with their count and CRC32C (docs/protocol.md, Snapshot). A node id is 1 to 127 bytes,
// an address 1 to 255 (a client address may be empty).
//
// Keys are 1..127 bytes, sources 0..127. Lists are sorted by key bytes. An
// unknown command byte, a bad length or bytes after the request are
// answered '-'. New commands take new bytes, so old clients keep working.
//
// With authentication on (Config.Tokens), a request comes wrapped as
// [0x80][n u16][token n][request], with an admin's token; one that does
// not is answered '-' (the membership commands and the snapshot: '-' with
// CodeNotAdmin).
//
// With Config.TLS (and Client.TLS) the same bytes travel inside TLS; the
// handshake counts against the request's timeout.
package manager
