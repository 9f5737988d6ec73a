"""Checks the encoder and the answer table against clients/testdata/vectors.json."""

import json
import pathlib
import unittest

import lockingcenter
from lockingcenter import Action, Client, InvalidKeyError, InvalidSourceError, Result

from fakeserver import FakeServer, dead_address

VECTORS = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "testdata" / "vectors.json").read_text()
)
ACTIONS = {name: Action(byte) for name, byte in VECTORS["actions"].items()}


class RequestVectors(unittest.TestCase):
    def test_encode_request(self) -> None:
        self.assertGreater(len(VECTORS["requests"]), 0)
        for v in VECTORS["requests"]:
            with self.subTest(v["name"]):
                self.assertEqual(ACTIONS[v["action"]], v["action_byte"])
                got = lockingcenter.encode_request(
                    v["action_byte"],
                    bytes.fromhex(v.get("key_hex", "")),
                    bytes.fromhex(v.get("source_hex", "")),
                )
                self.assertEqual(got.hex(), v["request_hex"])

    def test_client_sends_vector_bytes(self) -> None:
        """Each lock and try_lock vector, sent through the client as bytes
        and, where the bytes are UTF-8, as text, arrives byte for byte."""
        with FakeServer(b"+") as server:
            for v in VECTORS["requests"]:
                key = bytes.fromhex(v.get("key_hex", ""))
                source = bytes.fromhex(v.get("source_hex", ""))
                forms = [(key, source)]
                try:
                    forms.append((key.decode(), source.decode()))
                except UnicodeDecodeError:
                    pass
                for k, s in forms:
                    with self.subTest(v["name"], text=isinstance(k, str)):
                        c = Client(server.address, source=s)
                        call = {
                            "lock": lambda: c.lock(k),
                            "trylock": lambda: c.try_lock(k),
                            "unlock": lambda: c.unlock(k),
                            "reset-key": lambda: c.reset_by_key(k),
                            "reset-source": lambda: c.reset_by_source(s),
                        }[v["action"]]
                        call()
                        self.assertEqual(server.requests[-1].hex(), v["request_hex"])


class AnswerVectors(unittest.TestCase):
    def test_interpret_answer(self) -> None:
        for v in VECTORS["answers"]:
            with self.subTest(action=v["action"], answer=v["answer_hex"]):
                got = lockingcenter.interpret_answer(
                    ACTIONS[v["action"]], bytes.fromhex(v["answer_hex"])[0]
                )
                self.assertEqual(got, Result(v["result"]))

    def test_client_results(self) -> None:
        for v in VECTORS["answers"]:
            with self.subTest(action=v["action"], answer=v["answer_hex"]):
                with FakeServer(bytes.fromhex(v["answer_hex"])) as server:
                    c = Client(server.address, source="vectors")
                    call = {
                        "lock": lambda: c.lock("k"),
                        "trylock": lambda: c.try_lock("k"),
                        "unlock": lambda: c.unlock("k"),
                        "reset-key": lambda: c.reset_by_key("k"),
                        "reset-source": lambda: c.reset_by_source("vectors"),
                    }[v["action"]]
                    try:
                        returned = call()
                    except lockingcenter.LockingCenterError:
                        got = "failed"
                    else:
                        got = "busy" if returned is False else "ok"
                    self.assertEqual(got, v["result"])


class InvalidVectors(unittest.TestCase):
    def test_invalid_keys_refused_before_connecting(self) -> None:
        c = Client(dead_address())
        for v in VECTORS["invalid_keys"]:
            key = bytes.fromhex(v["key_hex"])
            for name in ("lock", "try_lock", "unlock", "wait", "reset_by_key"):
                with self.subTest(v["name"], call=name):
                    with self.assertRaises(InvalidKeyError):
                        getattr(c, name)(key)

    def test_invalid_sources_refused(self) -> None:
        address = dead_address()
        for v in VECTORS["invalid_sources"]:
            source = bytes.fromhex(v["source_hex"])
            with self.subTest(v["name"]):
                with self.assertRaises(InvalidSourceError):
                    Client(address).reset_by_source(source)
                with self.assertRaises(InvalidSourceError):
                    Client(address, source=source)


if __name__ == "__main__":
    unittest.main()
