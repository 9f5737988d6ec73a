//! The frames of the session protocol (docs/protocol.md, "Mutex port,
//! session protocol (v2)"): their bytes, and nothing of what they mean.
//!
//! ```text
//! [length: u32] bytes after this field, 9 to 65,536
//! [type:   u8]
//! [id:     u64] request id
//! [fields]      length - 9 bytes, each [tag: u8] [size: u16] [value]
//! ```
//!
//! Integers are big-endian. A list item (`held`, `parked`, `holder`) is a
//! field whose value is itself a sequence of fields.

use std::fmt;

/// The four bytes a client sends first: ASCII `LC/2`.
pub const PREFACE: &[u8; 4] = b"LC/2";
/// Largest value of a frame's length field, in either direction.
pub const MAX_FRAME_LEN: usize = 65_536;
/// Bytes of a frame after its length field and before its fields.
const HEADER_LEN: usize = 9;

/// Frame types.
pub mod typ {
    pub const HELLO: u8 = 0x01;
    pub const RESUME: u8 = 0x02;
    pub const ACQUIRE: u8 = 0x03;
    pub const RELEASE: u8 = 0x04;
    pub const RENEW: u8 = 0x05;
    pub const CANCEL: u8 = 0x06;
    pub const DESCRIBE: u8 = 0x07;
    pub const PING: u8 = 0x08;
    pub const CLOSE: u8 = 0x09;
    pub const WATCH: u8 = 0x0A;
    pub const WELCOME: u8 = 0x81;
    pub const GRANTED: u8 = 0x82;
    pub const OK: u8 = 0x83;
    pub const REFUSED: u8 = 0x84;
    pub const LOST: u8 = 0x85;
    pub const INFO: u8 = 0x86;
    pub const GOODBYE: u8 = 0x87;
    pub const EVENT: u8 = 0x88;
    pub const MORE: u8 = 0x89;
}

/// Field tags.
pub mod tag {
    pub const KEY: u8 = 0x01;
    pub const NAME: u8 = 0x02;
    pub const TTL_MS: u8 = 0x03;
    pub const CREDENTIAL: u8 = 0x04;
    pub const SESSION: u8 = 0x05;
    pub const SECRET: u8 = 0x06;
    pub const TOKEN: u8 = 0x07;
    pub const WAIT_MS: u8 = 0x08;
    pub const LEASE_MS: u8 = 0x09;
    pub const DELAY_MS: u8 = 0x0A;
    pub const TARGET: u8 = 0x0B;
    pub const SERVER: u8 = 0x0C;
    pub const CODE: u8 = 0x0D;
    pub const MESSAGE: u8 = 0x0E;
    pub const QUEUE: u8 = 0x0F;
    pub const APPLIED: u8 = 0x10;
    pub const LEFT_MS: u8 = 0x11;
    pub const HELD_MS: u8 = 0x12;
    pub const KEEPALIVE_MS: u8 = 0x13;
    pub const REQUEST: u8 = 0x14;
    pub const MODE: u8 = 0x15;
    pub const LIMIT: u8 = 0x16;
    pub const PRIORITY: u8 = 0x17;
    pub const REENTRANT: u8 = 0x18;
    pub const OWNER: u8 = 0x19;
    pub const COUNT: u8 = 0x1A;
    pub const LEADER: u8 = 0x1B;
    pub const EVENT: u8 = 0x1C;
    pub const AT_MS: u8 = 0x1D;
    pub const MORE: u8 = 0x1E;
    pub const NOTE: u8 = 0x1F;
    pub const HELD: u8 = 0x20;
    pub const PARKED: u8 = 0x21;
    pub const HOLDER: u8 = 0x22;
    pub const LAPSE: u8 = 0x23;
}

/// Codes of REFUSED, LOST and GOODBYE.
pub mod code {
    pub const BUSY: u64 = 1;
    pub const TIMEOUT: u64 = 2;
    pub const CANCELLED: u64 = 3;
    pub const RESET: u64 = 4;
    pub const STALE_TOKEN: u64 = 5;
    pub const DUPLICATE: u64 = 6;
    pub const BAD_REQUEST: u64 = 7;
    pub const UNSUPPORTED: u64 = 8;
    pub const SESSION_ENDED: u64 = 9;
    pub const NOT_DURABLE: u64 = 10;
    pub const LEASE_EXPIRED: u64 = 11;
    pub const SESSION_EXPIRED: u64 = 12;
    pub const PROTOCOL_ERROR: u64 = 13;
    pub const UNKNOWN_SESSION: u64 = 14;
    pub const SHUTTING_DOWN: u64 = 15;
    pub const DEADLOCK: u64 = 16;
    pub const LIMIT_MISMATCH: u64 = 17;
    pub const UPGRADE: u64 = 18;
    pub const NOT_LEADER: u64 = 19;
    pub const SLOW_CONSUMER: u64 = 20;
    pub const UNAUTHENTICATED: u64 = 21;
    pub const FORBIDDEN: u64 = 22;
    pub const RATE_LIMITED: u64 = 23;
    pub const OVER_LIMIT: u64 = 24;

    /// The name docs/protocol.md gives a code.
    pub fn name(code: u64) -> &'static str {
        const NAMES: [&str; 25] = [
            "code 0",
            "busy",
            "timeout",
            "cancelled",
            "reset",
            "stale_token",
            "duplicate",
            "bad_request",
            "unsupported",
            "session_ended",
            "not_durable",
            "lease_expired",
            "session_expired",
            "protocol_error",
            "unknown_session",
            "shutting_down",
            "deadlock",
            "limit_mismatch",
            "upgrade",
            "not_leader",
            "slow_consumer",
            "unauthenticated",
            "forbidden",
            "rate_limited",
            "over_limit",
        ];
        NAMES.get(code as usize).copied().unwrap_or("an unknown code")
    }
}

/// What a value of `tag` may be: an exact size, or at most so many bytes.
/// Tags this client does not know take anything.
enum Size {
    Exactly(usize),
    AtMost(usize),
}

fn size_of(t: u8) -> Size {
    use tag::*;
    match t {
        CODE | MODE | REENTRANT | EVENT | MORE | LAPSE => Size::Exactly(1),
        TTL_MS | WAIT_MS | LEASE_MS | DELAY_MS | QUEUE | LEFT_MS | HELD_MS | KEEPALIVE_MS | LIMIT | PRIORITY
        | COUNT => Size::Exactly(4),
        SESSION | TOKEN | TARGET | APPLIED | REQUEST | AT_MS => Size::Exactly(8),
        SECRET => Size::Exactly(16),
        KEY | NAME | OWNER => Size::AtMost(127),
        SERVER | LEADER => Size::AtMost(255),
        CREDENTIAL | MESSAGE | NOTE => Size::AtMost(1024),
        _ => Size::AtMost(u16::MAX as usize),
    }
}

fn is_list(t: u8) -> bool {
    matches!(t, tag::HELD | tag::PARKED | tag::HOLDER)
}

/// A frame the peer sent that breaks the format: the message names the
/// fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError(pub String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One field: its tag and its value's bytes (for a list item, the item's
/// own fields, encoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub tag: u8,
    pub value: Vec<u8>,
}

impl Field {
    pub fn bytes(tag: u8, value: impl AsRef<[u8]>) -> Field {
        Field { tag, value: value.as_ref().to_vec() }
    }
    pub fn u8(tag: u8, v: u8) -> Field {
        Field { tag, value: vec![v] }
    }
    pub fn u32(tag: u8, v: u32) -> Field {
        Field { tag, value: v.to_be_bytes().to_vec() }
    }
    pub fn u64(tag: u8, v: u64) -> Field {
        Field { tag, value: v.to_be_bytes().to_vec() }
    }
    /// A list item made of `fields`.
    pub fn item(tag: u8, fields: &[Field]) -> Field {
        let mut value = Vec::new();
        append_fields(&mut value, fields);
        Field { tag, value }
    }
}

/// A frame: its type, its request id and its fields, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub typ: u8,
    pub id: u64,
    pub fields: Vec<Field>,
}

impl Frame {
    pub fn new(typ: u8, id: u64, fields: Vec<Field>) -> Frame {
        Frame { typ, id, fields }
    }

    /// The value of the first field with `tag`.
    pub fn get(&self, tag: u8) -> Option<&[u8]> {
        find(&self.fields, tag)
    }

    /// The integer value of `tag` (1, 4 or 8 bytes; the decoder checked
    /// the size of every tag it knows).
    pub fn uint(&self, tag: u8) -> Option<u64> {
        self.get(tag).map(be_uint)
    }

    /// The text value of `tag`, with invalid UTF-8 replaced.
    pub fn text(&self, tag: u8) -> String {
        self.get(tag).map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default()
    }

    /// The items of the list `tag`, each its fields.
    pub fn items(&self, tag: u8) -> Vec<Vec<Field>> {
        self.fields
            .iter()
            .filter(|f| f.tag == tag)
            .map(|f| parse_fields(&f.value).unwrap_or_default()) // checked when the frame was decoded
            .collect()
    }

    /// The frame's bytes, length field included.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        self.encode_into(&mut b);
        b
    }

    /// Appends the frame's bytes to `b`.
    pub fn encode_into(&self, b: &mut Vec<u8>) {
        let start = b.len();
        b.extend_from_slice(&[0; 4]);
        b.push(self.typ);
        b.extend_from_slice(&self.id.to_be_bytes());
        append_fields(b, &self.fields);
        let len = (b.len() - start - 4) as u32;
        b[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }
}

/// The value of the first of `fields` with `tag`.
pub fn find(fields: &[Field], tag: u8) -> Option<&[u8]> {
    fields.iter().find(|f| f.tag == tag).map(|f| f.value.as_slice())
}

/// The integer value of the first of `fields` with `tag`.
pub fn find_uint(fields: &[Field], tag: u8) -> Option<u64> {
    find(fields, tag).map(be_uint)
}

fn be_uint(v: &[u8]) -> u64 {
    v.iter().take(8).fold(0, |n, &b| n << 8 | u64::from(b))
}

fn append_fields(b: &mut Vec<u8>, fields: &[Field]) {
    for f in fields {
        b.push(f.tag);
        b.extend_from_slice(&(f.value.len() as u16).to_be_bytes());
        b.extend_from_slice(&f.value);
    }
}

/// Parses a sequence of fields, checking what docs/protocol.md makes a
/// malformed frame: a field past the end, a tag given twice (but the list
/// tags), a fixed-size value of another size, a byte string over its
/// limit. A list item's fields are checked the same way.
pub fn parse_fields(mut b: &[u8]) -> Result<Vec<Field>, FormatError> {
    let mut fields: Vec<Field> = Vec::new();
    while !b.is_empty() {
        if b.len() < 3 {
            return Err(FormatError(format!("a field header of {} bytes at the end", b.len())));
        }
        let t = b[0];
        let size = u16::from_be_bytes([b[1], b[2]]) as usize;
        if b.len() - 3 < size {
            return Err(FormatError(format!("field 0x{t:02x} of {size} bytes runs past the end")));
        }
        let value = &b[3..3 + size];
        match size_of(t) {
            Size::Exactly(n) if size != n => {
                return Err(FormatError(format!("field 0x{t:02x} of {size} bytes, want {n}")));
            }
            Size::AtMost(n) if size > n => {
                return Err(FormatError(format!("field 0x{t:02x} of {size} bytes, over its limit of {n}")));
            }
            _ => {}
        }
        if is_list(t) {
            parse_fields(value).map_err(|e| FormatError(format!("in an item of 0x{t:02x}: {e}")))?;
        } else if fields.iter().any(|f| f.tag == t) {
            return Err(FormatError(format!("field 0x{t:02x} given twice")));
        }
        fields.push(Field { tag: t, value: value.to_vec() });
        b = &b[3 + size..];
    }
    Ok(fields)
}

/// Decodes the frame at the start of `buf`: `Ok(None)` while it is
/// incomplete, else the frame and how many bytes it took. A length out of
/// range is an error as soon as the length field is there, before
/// anything else is read.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, FormatError> {
    let head = match buf.get(..4) {
        Some(h) => h,
        None => return Ok(None),
    };
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if !(HEADER_LEN..=MAX_FRAME_LEN).contains(&len) {
        return Err(FormatError(format!("frame length {len}, want {HEADER_LEN} to {MAX_FRAME_LEN}")));
    }
    let body = match buf.get(4..4 + len) {
        Some(b) => b,
        None => return Ok(None),
    };
    let mut id = [0u8; 8];
    id.copy_from_slice(&body[1..9]);
    let fields = parse_fields(&body[9..])?;
    Ok(Some((Frame { typ: body[0], id: u64::from_be_bytes(id), fields }, 4 + len)))
}
