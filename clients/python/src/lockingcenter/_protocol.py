"""Bytes of the mutex port: one request and one answer byte per connection.

A request is the action byte, then the key as one length byte and the key's
bytes (all actions but RESET_SOURCE), then the source the same way (LOCK,
TRY_LOCK, RESET_SOURCE)."""

import enum

MAX_KEY_LEN = 127
MAX_SOURCE_LEN = 127

ANSWER_OK = 0x2B  # '+'
ANSWER_FAILED = 0x2D  # '-'
ANSWER_BUSY = 0x23  # '#'


class Action(enum.IntEnum):
    """The action byte of a request."""

    LOCK = 1
    UNLOCK = 2
    RESET_KEY = 3
    RESET_SOURCE = 4
    TRY_LOCK = 5


class Result(enum.Enum):
    """What an answer byte means for a request."""

    OK = "ok"
    BUSY = "busy"  # try_lock lost: a normal outcome
    FAILED = "failed"  # '-', or a byte the protocol does not define here


_WITH_KEY = (Action.LOCK, Action.UNLOCK, Action.RESET_KEY, Action.TRY_LOCK)
_WITH_SOURCE = (Action.LOCK, Action.TRY_LOCK, Action.RESET_SOURCE)


def encode_request(action: int, key: bytes = b"", source: bytes = b"") -> bytes:
    """Return the wire bytes of one request. ``key`` is left out for
    RESET_SOURCE, ``source`` for UNLOCK and RESET_KEY. Lengths are not
    checked here: the client checks them before it calls this.

    Raises ValueError for an unknown action."""
    action = Action(action)
    out = bytearray([action])
    if action in _WITH_KEY:
        out.append(len(key))
        out += key
    if action in _WITH_SOURCE:
        out.append(len(source))
        out += source
    return bytes(out)


def interpret_answer(action: int, answer: int) -> Result:
    """Return what the answer byte means for a request of ``action``: '#' is
    BUSY for TRY_LOCK only; '+' is OK; anything else is FAILED."""
    if answer == ANSWER_OK:
        return Result.OK
    if answer == ANSWER_BUSY and action == Action.TRY_LOCK:
        return Result.BUSY
    return Result.FAILED
