"""The session protocol's frames against clients/testdata/session-vectors.json,
and a randomised decoder that never raises anything but ProtocolError."""

import json
import pathlib
import random
import unittest

from lockingcenter import PREFACE, Code, Frame, FrameDecoder, FrameType, ProtocolError, Tag, decode_frame, encode_frame
from lockingcenter._frames import LIST_TAGS, MAX_FRAME, iter_frames

VECTORS = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "testdata" / "session-vectors.json").read_text()
)
FRAMES = {v["name"]: v for v in VECTORS["frames"]}


def fields_of(v: dict) -> list[tuple[int, bytes]]:
    return [(f["tag"], bytes.fromhex(f["value_hex"])) for f in v["fields"]]


class Vectors(unittest.TestCase):
    def test_preface(self) -> None:
        self.assertEqual(PREFACE.hex(), VECTORS["preface_hex"])

    def test_tables(self) -> None:
        for name, value in VECTORS["types"].items():
            self.assertEqual(FrameType[name.upper()], value, name)
        for name, value in VECTORS["tags"].items():
            self.assertEqual(Tag[name.upper()], value, name)
        for name, value in VECTORS["codes"].items():
            self.assertEqual(Code[name.upper()], value, name)
        self.assertEqual(len(FrameType), len(VECTORS["types"]))
        self.assertEqual(len(Tag), len(VECTORS["tags"]))
        self.assertEqual(len(Code), len(VECTORS["codes"]))

    def test_encode_every_frame(self) -> None:
        self.assertGreater(len(VECTORS["frames"]), 30)
        for v in VECTORS["frames"]:
            with self.subTest(v["name"]):
                self.assertEqual(encode_frame(v["type"], v["id"], fields_of(v)).hex(), v["frame_hex"])

    def test_decode_every_frame(self) -> None:
        for v in VECTORS["frames"]:
            with self.subTest(v["name"]):
                b = bytes.fromhex(v["frame_hex"])
                f, n = decode_frame(b + b"\x00\x00")
                self.assertEqual(n, len(b))
                self.assertEqual((f.type, f.id, f.fields), (v["type"], v["id"], fields_of(v)))
                # List items decode to fields that encode back to their bytes.
                for tag in LIST_TAGS:
                    for item, (t, value) in zip(f.items(tag), [x for x in f.fields if x[0] == tag]):
                        self.assertEqual(t, tag)
                        self.assertEqual(encode_frame(0, 0, item.fields)[13:], value)

    def test_stream_byte_by_byte(self) -> None:
        """Every frame but the MOREs, back to back, fed one byte at a time."""
        vs = [v for v in VECTORS["frames"] if v["type"] != FrameType.MORE and not v["name"].endswith("of three frames")
              and not v["name"].endswith("of two frames")]  # fmt: skip
        stream = b"".join(bytes.fromhex(v["frame_hex"]) for v in vs)
        dec, got = FrameDecoder(), []
        for i in range(len(stream)):
            got += dec.feed(stream[i : i + 1])
        self.assertEqual([(f.type, f.id, f.fields) for f in got], [(v["type"], v["id"], fields_of(v)) for v in vs])
        self.assertEqual(dec.pending, b"")

    def test_long_welcome_joined(self) -> None:
        names = ["welcome of a resume, the first of three frames", "more of a welcome, another to come",
                 "more of a welcome, the last"]  # fmt: skip
        stream = b"".join(bytes.fromhex(FRAMES[n]["frame_hex"]) for n in names)
        for step in (1, 7, len(stream)):
            dec, got = FrameDecoder(), []
            for i in range(0, len(stream), step):
                got += dec.feed(stream[i : i + step])
            self.assertEqual(len(got), 1)
            w = got[0]
            self.assertEqual((w.type, w.id), (FrameType.WELCOME, 1))
            self.assertEqual(w.get(Tag.MORE), None)
            self.assertEqual([it.get(Tag.KEY) for it in w.items(Tag.HELD)], [b"jobs/nightly", b"orders/batch-7"])
            self.assertEqual([it.get(Tag.KEY) for it in w.items(Tag.PARKED)], [b"pool", b"queue"])
            self.assertEqual(w.uint(Tag.APPLIED), 8)

    def test_long_info_joined(self) -> None:
        stream = bytes.fromhex(FRAMES["info, the first of two frames"]["frame_hex"]) + bytes.fromhex(
            FRAMES["more of an info, the last"]["frame_hex"]
        )
        got = FrameDecoder().feed(stream)
        self.assertEqual([f.type for f in got], [FrameType.INFO])
        self.assertEqual(len(got[0].items(Tag.HOLDER)), 2)

    def test_more_out_of_place(self) -> None:
        more = bytes.fromhex(FRAMES["more of a welcome, the last"]["frame_hex"])
        first = bytes.fromhex(FRAMES["welcome of a resume, the first of three frames"]["frame_hex"])
        granted = bytes.fromhex(FRAMES["granted"]["frame_hex"])
        other_id = encode_frame(FrameType.MORE, 99, [])
        for name, stream in [("a MORE alone", more), ("a MORE of another id", first + other_id),
                             ("a GRANTED inside a long answer", first + granted)]:  # fmt: skip
            with self.subTest(name), self.assertRaises(ProtocolError):
                FrameDecoder().feed(stream)

    def test_goodbye_inside_a_long_answer(self) -> None:
        first = bytes.fromhex(FRAMES["welcome of a resume, the first of three frames"]["frame_hex"])
        bye = bytes.fromhex(FRAMES["goodbye"]["frame_hex"])
        self.assertEqual([f.type for f in FrameDecoder().feed(first + bye)], [FrameType.GOODBYE])


class Malformed(unittest.TestCase):
    def bad(self, b: bytes) -> None:
        with self.assertRaises(ProtocolError):
            FrameDecoder().feed(b)
        with self.assertRaises(ProtocolError):
            decode_frame(b)

    def test_lengths(self) -> None:
        self.bad((8).to_bytes(4, "big") + bytes(8))
        self.bad((MAX_FRAME + 1).to_bytes(4, "big"))
        self.bad(b"\xff\xff\xff\xff")

    def test_fields(self) -> None:
        def frame(body: bytes) -> bytes:
            return (9 + len(body)).to_bytes(4, "big") + bytes([FrameType.GRANTED]) + bytes(8) + body

        self.bad(frame(b"\x07\x00"))  # a field header cut short
        self.bad(frame(b"\x01\x00\x05abc"))  # past the end
        self.bad(frame(b"\x07\x00\x04abcd"))  # a token of 4 bytes
        self.bad(frame(b"\x01\x00\x80" + b"k" * 128))  # a key over 127 bytes
        self.bad(frame(b"\x01\x00\x01k\x01\x00\x01k"))  # a tag twice
        self.bad(frame(b"\x20\x00\x03\x07\x00\x01"))  # a list item that is no field sequence
        self.bad(frame(b"\x20\x00\x04\x07\x00\x01x"))  # a list item with a bad field
        # A tag this client does not know is kept, even twice.
        f, _ = decode_frame(frame(b"\x7f\x00\x01x\x7f\x00\x00"))
        self.assertEqual(f.fields, [(0x7F, b"x"), (0x7F, b"")])
        # List tags repeat.
        f, _ = decode_frame(frame(b"\x20\x00\x00\x20\x00\x00"))
        self.assertEqual(len(f.items(Tag.HELD)), 2)

    def test_iter_frames_cut(self) -> None:
        b = bytes.fromhex(FRAMES["granted"]["frame_hex"])
        with self.assertRaises(ProtocolError):
            list(iter_frames(b[:-1]))


class Fuzz(unittest.TestCase):
    """Random bytes, and vector frames with random changes, fed in random
    pieces: the decoder returns frames or raises ProtocolError, nothing
    else, and a frame it returns encodes back to its bytes."""

    def feed(self, data: bytes, rng: random.Random) -> None:
        dec = FrameDecoder()
        i = 0
        try:
            while i < len(data):
                n = rng.randint(1, 64)
                for f in dec.feed(data[i : i + n]):
                    self.assertIsInstance(f, Frame)
                    if f.type != FrameType.MORE:
                        for tag in LIST_TAGS:
                            f.items(tag)
                i += n
        except ProtocolError:
            pass

    def test_random_and_mutated(self) -> None:
        rng = random.Random(20261202)
        seeds = [bytes.fromhex(v["frame_hex"]) for v in VECTORS["frames"]]
        for _ in range(3000):
            choice = rng.random()
            if choice < 0.2:
                data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
            else:
                data = bytearray(b"".join(rng.choice(seeds) for _ in range(rng.randint(1, 4))))
                for _ in range(rng.randint(1, 6)):
                    op = rng.random()
                    pos = rng.randrange(len(data) + 1)
                    if op < 0.4 and data:
                        data[min(pos, len(data) - 1)] = rng.getrandbits(8)
                    elif op < 0.6:
                        data[pos:pos] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 8)))
                    elif op < 0.8:
                        del data[pos : pos + rng.randint(1, 8)]
                    else:
                        data = data[:pos]
                data = bytes(data)
            self.feed(data, rng)

    def test_well_formed_random_frames_round_trip(self) -> None:
        rng = random.Random(7)
        tags = [t for t in Tag if t not in LIST_TAGS]
        sizes = {Tag.SECRET: 16, Tag.SESSION: 8, Tag.TOKEN: 8, Tag.TARGET: 8, Tag.APPLIED: 8, Tag.REQUEST: 8,
                 Tag.AT_MS: 8, Tag.CODE: 1, Tag.MODE: 1, Tag.REENTRANT: 1, Tag.EVENT: 1, Tag.MORE: 1}  # fmt: skip
        for _ in range(500):
            chosen = rng.sample(tags, rng.randint(0, 8))
            fields = []
            for t in chosen:
                n = sizes.get(t, 4 if t in (Tag.TTL_MS, Tag.WAIT_MS, Tag.LEASE_MS, Tag.DELAY_MS, Tag.QUEUE, Tag.LEFT_MS,
                                            Tag.HELD_MS, Tag.KEEPALIVE_MS, Tag.LIMIT, Tag.PRIORITY, Tag.COUNT)
                              else rng.randint(0, 100))  # fmt: skip
                if t == Tag.MORE:
                    continue  # a more of 1 would wait for a MORE
                fields.append((int(t), bytes(rng.getrandbits(8) for _ in range(n))))
            typ = rng.choice([FrameType.GRANTED, FrameType.OK, FrameType.REFUSED, FrameType.LOST])
            b = encode_frame(typ, rng.getrandbits(64), fields)
            (f,) = FrameDecoder().feed(b)
            self.assertEqual(encode_frame(f.type, f.id, f.fields), b)


if __name__ == "__main__":
    unittest.main()
