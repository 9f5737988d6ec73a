"""Frames of the session protocol (docs/protocol.md, "Mutex port, session
protocol (v2)"): their bytes, and the rules a frame from the server must
follow.

A frame is ``[length: u32][type: u8][id: u64][fields]``, the length
counting the bytes after it (9 to 65,536). A field is ``[tag: u8][size:
u16][value]``. Integers are big-endian and unsigned. The list tags (held,
parked, holder) repeat, one per item, and an item's value is itself a
sequence of fields.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator, Sequence

from ._errors import ProtocolError

PREFACE = b"LC/2"
MAX_FRAME = 65536  # the largest length a frame may give
HEADER_LEN = 9  # type and id: the least a frame's length counts
MAX_NOTE_LEN = 1024
MAX_OWNER_LEN = 127
MAX_CREDENTIAL_LEN = 1024


class FrameType(enum.IntEnum):
    """The type byte of a frame."""

    HELLO = 0x01
    RESUME = 0x02
    ACQUIRE = 0x03
    RELEASE = 0x04
    RENEW = 0x05
    CANCEL = 0x06
    DESCRIBE = 0x07
    PING = 0x08
    CLOSE = 0x09
    WATCH = 0x0A
    WELCOME = 0x81
    GRANTED = 0x82
    OK = 0x83
    REFUSED = 0x84
    LOST = 0x85
    INFO = 0x86
    GOODBYE = 0x87
    EVENT = 0x88
    MORE = 0x89


class Tag(enum.IntEnum):
    """The tag byte of a field."""

    KEY = 0x01
    NAME = 0x02
    TTL_MS = 0x03
    CREDENTIAL = 0x04
    SESSION = 0x05
    SECRET = 0x06
    TOKEN = 0x07
    WAIT_MS = 0x08
    LEASE_MS = 0x09
    DELAY_MS = 0x0A
    TARGET = 0x0B
    SERVER = 0x0C
    CODE = 0x0D
    MESSAGE = 0x0E
    QUEUE = 0x0F
    APPLIED = 0x10
    LEFT_MS = 0x11
    HELD_MS = 0x12
    KEEPALIVE_MS = 0x13
    REQUEST = 0x14
    MODE = 0x15
    LIMIT = 0x16
    PRIORITY = 0x17
    REENTRANT = 0x18
    OWNER = 0x19
    COUNT = 0x1A
    LEADER = 0x1B
    EVENT = 0x1C
    AT_MS = 0x1D
    MORE = 0x1E
    NOTE = 0x1F
    HELD = 0x20
    PARKED = 0x21
    HOLDER = 0x22
    LAPSE = 0x23


class Code(enum.IntEnum):
    """Why a request was refused, a lock lost or a connection ended (the
    ``code`` field)."""

    BUSY = 1
    TIMEOUT = 2
    CANCELLED = 3
    RESET = 4
    STALE_TOKEN = 5
    DUPLICATE = 6
    BAD_REQUEST = 7
    UNSUPPORTED = 8
    SESSION_ENDED = 9
    NOT_DURABLE = 10
    LEASE_EXPIRED = 11
    SESSION_EXPIRED = 12
    PROTOCOL_ERROR = 13
    UNKNOWN_SESSION = 14
    SHUTTING_DOWN = 15
    DEADLOCK = 16
    LIMIT_MISMATCH = 17
    UPGRADE = 18
    NOT_LEADER = 19
    SLOW_CONSUMER = 20
    UNAUTHENTICATED = 21
    FORBIDDEN = 22
    RATE_LIMITED = 23
    OVER_LIMIT = 24


def code_name(code: int) -> str:
    """The protocol's name of a code ("busy", ...), or "code N"."""
    try:
        return Code(code).name.lower()
    except ValueError:
        return f"code {code}"


# Value sizes of the fixed-size tags, and the limits of the others.
_FIXED = {
    Tag.TTL_MS: 4, Tag.SESSION: 8, Tag.SECRET: 16, Tag.TOKEN: 8, Tag.WAIT_MS: 4, Tag.LEASE_MS: 4,
    Tag.DELAY_MS: 4, Tag.TARGET: 8, Tag.CODE: 1, Tag.QUEUE: 4, Tag.APPLIED: 8, Tag.LEFT_MS: 4,
    Tag.HELD_MS: 4, Tag.KEEPALIVE_MS: 4, Tag.REQUEST: 8, Tag.MODE: 1, Tag.LIMIT: 4, Tag.PRIORITY: 4,
    Tag.REENTRANT: 1, Tag.COUNT: 4, Tag.EVENT: 1, Tag.AT_MS: 8, Tag.MORE: 1,
}  # fmt: skip
_LIMIT = {
    Tag.KEY: 127, Tag.NAME: 127, Tag.CREDENTIAL: MAX_CREDENTIAL_LEN, Tag.SERVER: 255, Tag.MESSAGE: 1024,
    Tag.OWNER: MAX_OWNER_LEN, Tag.LEADER: 255, Tag.NOTE: MAX_NOTE_LEN,
}  # fmt: skip
LIST_TAGS = frozenset((Tag.HELD, Tag.PARKED, Tag.HOLDER))
# As plain ints, for the decoder's loop.
_FIXED_INT = {int(t): n for t, n in _FIXED.items()}
_LIMIT_INT = {int(t): n for t, n in _LIMIT.items()}
_LIST_INT = frozenset(int(t) for t in LIST_TAGS)
_KNOWN_INT = frozenset(int(t) for t in Tag)

_HEAD = struct.Struct(">IBQ")
_FIELD = struct.Struct(">BH")

Field = tuple[int, bytes]


class Fields:
    """A sequence of fields (a frame's, or a list item's) and their values
    by tag. ``fields`` keeps them in order, as they came."""

    __slots__ = ("fields", "_by_tag")

    def __init__(self, fields: Sequence[Field], by_tag: dict[int, bytes] | None = None) -> None:
        # A decoder's list (with its map) is taken as it is; any other sequence is copied.
        self.fields: list[Field] = fields if by_tag is not None and isinstance(fields, list) else list(fields)
        if by_tag is None:
            by_tag = {}
            for tag, value in self.fields:
                by_tag.setdefault(tag, value)
        self._by_tag = by_tag

    def get(self, tag: int) -> bytes | None:
        """The value of the first field tagged ``tag``, or None."""
        return self._by_tag.get(tag)

    def uint(self, tag: int) -> int | None:
        """The field tagged ``tag`` as an unsigned integer, or None."""
        v = self._by_tag.get(tag)
        return None if v is None else int.from_bytes(v, "big")

    def text(self, tag: int) -> str:
        """The field tagged ``tag`` as text (UTF-8, undecodable bytes
        replaced); empty when absent."""
        v = self._by_tag.get(tag)
        return "" if v is None else v.decode("utf-8", "replace")

    def items(self, tag: int) -> list[Fields]:
        """The list items tagged ``tag``, each as its fields. The frame's
        decoder has checked them."""
        return [Fields(*_split_fields(v, nested=True)) for t, v in self.fields if t == tag]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fields!r})"


class Frame(Fields):
    """One frame: its type, its request id and its fields."""

    __slots__ = ("type", "id")

    def __init__(self, type: int, id: int, fields: Sequence[Field] = (), by_tag: dict[int, bytes] | None = None) -> None:
        super().__init__(fields, by_tag)
        self.type = type
        self.id = id

    def __repr__(self) -> str:
        try:
            name = FrameType(self.type).name
        except ValueError:
            name = f"0x{self.type:02x}"
        return f"Frame({name}, id={self.id}, {self.fields!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return (self.type, self.id, self.fields) == (other.type, other.id, other.fields)

    __hash__ = None  # type: ignore[assignment]


def u8(tag: int, value: int) -> Field:
    return (tag, bytes((value,)))


def u32(tag: int, value: int) -> Field:
    return (tag, value.to_bytes(4, "big"))


def u64(tag: int, value: int) -> Field:
    return (tag, value.to_bytes(8, "big"))


def encode_fields(fields: Iterable[Field]) -> bytes:
    """The bytes of a sequence of fields: a frame's body, or the value of a
    list item."""
    out = bytearray()
    for tag, value in fields:
        out += _FIELD.pack(tag, len(value))
        out += value
    return bytes(out)


def frame_head(type: int, id: int, body_len: int) -> bytes:
    """The length, type and id of a frame whose fields take body_len bytes."""
    return _HEAD.pack(HEADER_LEN + body_len, type, id)


def encode_frame(type: int, id: int, fields: Iterable[Field] = ()) -> bytes:
    """The bytes of one frame. Sizes are not checked: the session checks
    what it sends before it builds the frame.

    Raises ValueError for a frame over the limit."""
    body = encode_fields(fields)
    n = HEADER_LEN + len(body)
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes, over the limit of {MAX_FRAME}")
    return _HEAD.pack(n, type, id) + body


def _split_fields(b: bytes, nested: bool, i: int = 0, end: int = -1) -> tuple[list[Field], dict[int, bytes]]:
    """The fields of ``b``, checked as a frame from the server must be: a
    field inside its bytes, a fixed-size tag of its size, a string within
    its limit, no tag twice but the lists'; a list item's fields likewise
    (a list inside an item is left as its bytes). Tags this client does
    not know are kept, unchecked: a newer server may send them, even
    repeated.

    Returns the fields in order, and the first value of each tag.

    Raises ProtocolError."""
    out: list[Field] = []
    by_tag: dict[int, bytes] = {}
    if end < 0:
        end = len(b)
    start = i
    while i < end:
        if end - i < 3:
            raise ProtocolError(f"a field header cut short at byte {i - start} of {end - start}")
        tag, size = _FIELD.unpack_from(b, i)
        i += 3
        if size > end - i:
            raise ProtocolError(f"field 0x{tag:02x} of {size} bytes runs past the end ({end - i} left)")
        value = b[i : i + size]
        i += size
        fixed = _FIXED_INT.get(tag)
        if fixed is not None and size != fixed:
            raise ProtocolError(f"field 0x{tag:02x} of {size} bytes, want {fixed}")
        limit = _LIMIT_INT.get(tag)
        if limit is not None and size > limit:
            raise ProtocolError(f"field 0x{tag:02x} of {size} bytes, over its limit of {limit}")
        if tag in by_tag:
            if tag in _KNOWN_INT and tag not in _LIST_INT:
                raise ProtocolError(f"field 0x{tag:02x} twice")
        else:
            by_tag[tag] = value
        if tag in _LIST_INT and not nested:
            _split_fields(value, nested=True)
        out.append((tag, value))
    return out, by_tag


def decode_frame(data: bytes) -> tuple[Frame, int]:
    """Decode the frame at the start of ``data``. Returns it and the number
    of bytes it took.

    Raises ProtocolError for a malformed frame, and for bytes that hold no
    whole frame (see FrameDecoder for a stream)."""
    if len(data) < 4:
        raise ProtocolError(f"{len(data)} bytes hold no frame length")
    n = int.from_bytes(data[:4], "big")
    if not HEADER_LEN <= n <= MAX_FRAME:
        raise ProtocolError(f"frame length {n}, want {HEADER_LEN} to {MAX_FRAME}")
    if len(data) < 4 + n:
        raise ProtocolError(f"frame of {n} bytes cut short at {len(data) - 4}")
    return _parse(bytes(data), 0, 4 + n), 4 + n


def _parse(b: bytes, i: int, end: int) -> Frame:
    """The frame of b[i:end] (whole, its length checked)."""
    _, typ, rid = _HEAD.unpack_from(b, i)
    return Frame(typ, rid, *_split_fields(b, False, i + 13, end))


class FrameDecoder:
    """Cuts a byte stream from the server into frames, and joins the frames
    of a long answer (a WELCOME or INFO with ``more``, and the MORE frames
    that follow it) into one frame holding every list item, in order.

    ``feed`` returns the frames (and whole answers) that the bytes so far
    complete. After a ProtocolError the stream is unusable: drop the
    connection."""

    __slots__ = ("_buf", "_partial")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._partial: Frame | None = None  # a long answer being joined

    def feed(self, data: bytes) -> list[Frame]:
        if self._buf:
            self._buf += data
            b = bytes(self._buf)
        else:
            b = data
        out: list[Frame] = []
        i, end = 0, len(b)
        try:
            while end - i >= 4:
                n = int.from_bytes(b[i : i + 4], "big")
                if not HEADER_LEN <= n <= MAX_FRAME:
                    raise ProtocolError(f"frame length {n}, want {HEADER_LEN} to {MAX_FRAME}")
                if end - i < 4 + n:
                    break
                f = _parse(b, i, i + 4 + n)
                i += 4 + n
                f = self._join(f)
                if f is not None:
                    out.append(f)
        finally:
            self._buf = bytearray(b[i:])
        return out

    def _join(self, f: Frame) -> Frame | None:
        partial = self._partial
        if f.type == FrameType.MORE:
            if partial is None:
                raise ProtocolError("a MORE frame that continues no answer")
            if f.id != partial.id:
                raise ProtocolError(f"a MORE frame of request {f.id} inside the answer to {partial.id}")
            partial.fields.extend((t, v) for t, v in f.fields if t in _LIST_INT)
            if f.get(Tag.MORE) == b"\x01":
                return None
            self._partial = None
            return Frame(partial.type, partial.id, partial.fields)
        if partial is not None:
            if f.type == FrameType.GOODBYE:
                self._partial = None  # the answer cut short was not received
                return f
            raise ProtocolError(f"frame 0x{f.type:02x} inside a long answer to request {partial.id}")
        if f.get(Tag.MORE) == b"\x01" and f.type in (FrameType.WELCOME, FrameType.INFO):
            self._partial = Frame(f.type, f.id, [(t, v) for t, v in f.fields if t != Tag.MORE])
            return None
        return f

    @property
    def pending(self) -> bytes:
        """The bytes read past the last whole frame."""
        return bytes(self._buf)


def iter_frames(data: bytes) -> Iterator[Frame]:
    """Every frame of ``data`` (whole frames, back to back), each as it
    is: MORE frames are not joined. Raises ProtocolError."""
    i = 0
    while i < len(data):
        f, n = decode_frame(data[i:])
        i += n
        yield f
