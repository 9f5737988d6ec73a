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
//	command        byte  request            body after '+'
//	list keys       1    [1]                [count u32] count x ([n u8][key n])
//	list holders    2    [2]                [count u32] count x holder
//	reset key       3    [3][n][key n]      none
//	reset source    4    [4][m][source m]   none
//
//	holder: [n u8][key n] [m u8][source m] [r u8][remote r]
//	        [acquired i64: Unix nanoseconds] [held i64: nanoseconds]
//	        [waiters u32]
//
// Keys are 1..127 bytes, sources 0..127. Lists are sorted by key bytes. An
// unknown command byte, a bad length or bytes after the request are
// answered '-'. New commands take new bytes, so old clients keep working.
//
// With Config.TLS (and Client.TLS) the same bytes travel inside TLS; the
// handshake counts against the request's timeout.
package manager
