"""Behaviour of the client against a stand-in server: failures, timeouts,
cancellation."""

import threading
import unittest

from lockingcenter import (
    CancelledError,
    Client,
    CommunicationError,
    LockTimeoutError,
    ProtocolError,
    RefusedError,
)

from fakeserver import FakeServer, dead_address


class Failures(unittest.TestCase):
    def test_refused_connection_is_a_failure_not_busy(self) -> None:
        c = Client(dead_address())
        with self.assertRaises(CommunicationError):
            c.lock("k")
        with self.assertRaises(CommunicationError):
            c.try_lock("k")

    def test_answers(self) -> None:
        with FakeServer(b"-") as server:
            with self.assertRaises(RefusedError):
                Client(server.address).lock("k")
        with FakeServer(b"#") as server:
            self.assertFalse(Client(server.address).try_lock("k"))
            with self.assertRaises(ProtocolError):
                Client(server.address).lock("k")
        with FakeServer(b"") as server:  # closes without an answer
            with self.assertRaises(CommunicationError):
                Client(server.address).unlock("k")

    def test_bad_arguments(self) -> None:
        for address in ("localhost", "localhost:", ":1", "host:port", "host:99999"):
            with self.subTest(address):
                with self.assertRaises(ValueError):
                    Client(address)
        with self.assertRaises(TypeError):
            Client("127.0.0.1:1").lock(7)  # type: ignore[arg-type]


class Withdrawal(unittest.TestCase):
    def test_timeout_closes_the_connection(self) -> None:
        with FakeServer(None) as server:
            with self.assertRaises(LockTimeoutError):
                Client(server.address).lock("k", timeout=0.2)
            self.assertTrue(server.peer_closed.wait(10), "the server never saw the connection close")

    def test_close_cancels_a_parked_lock(self) -> None:
        with FakeServer(None) as server:
            c = Client(server.address)
            raised: list[BaseException] = []

            def lock() -> None:
                try:
                    c.lock("k")
                except BaseException as e:  # noqa: BLE001 - recorded for the test
                    raised.append(e)

            t = threading.Thread(target=lock)
            t.start()
            self.assertTrue(server.received.wait(10), "the request never arrived")
            c.close()
            t.join(10)
            self.assertFalse(t.is_alive())
            self.assertEqual([type(e) for e in raised], [CancelledError])
            self.assertTrue(server.peer_closed.wait(10), "the server never saw the connection close")
            with self.assertRaises(CancelledError):
                c.unlock("k")
            c.close()  # twice is fine

    def test_locked_releases_on_error(self) -> None:
        with FakeServer(b"+") as server:
            c = Client(server.address, source="s")
            with self.assertRaises(KeyError):
                with c.locked(b"k\x00"):
                    raise KeyError
            self.assertEqual([r.hex() for r in server.requests], ["01026b000173", "02026b00"])


if __name__ == "__main__":
    unittest.main()
