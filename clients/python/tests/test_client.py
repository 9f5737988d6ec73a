"""Behaviour of the client against a stand-in server: failures, timeouts,
cancellation."""

import threading
import unittest
from collections.abc import Callable

from lockingcenter import (
    CancelledError,
    Client,
    CommunicationError,
    LockTimeoutError,
    ProtocolError,
    ReadTimeoutError,
    RefusedError,
)

from fakeserver import FakeServer, dead_address


class InThread:
    """Runs call in a daemon thread and keeps what it raised."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.raised: list[BaseException] = []
        self._call = call
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._call()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.raised.append(e)

    def result(self, limit: float = 10.0) -> BaseException | None:
        """Waits for the call and returns what it raised. A call still
        running after limit seconds fails the test instead of hanging it."""
        self.thread.join(limit)
        if self.thread.is_alive():
            raise AssertionError(f"the call did not return within {limit} s")
        return self.raised[0] if self.raised else None


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
            lock = InThread(lambda: c.lock("k"))
            self.assertTrue(server.received.wait(10), "the request never arrived")
            c.close()
            self.assertIsInstance(lock.result(), CancelledError)
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


class ReadTimeout(unittest.TestCase):
    def test_calls_that_do_not_wait_give_up(self) -> None:
        with FakeServer(None) as server:
            c = Client(server.address, read_timeout=0.05)
            calls = {
                "try_lock": lambda: c.try_lock("k"),
                "unlock": lambda: c.unlock("k"),
                "reset_by_key": lambda: c.reset_by_key("k"),
                "reset_by_source": lambda: c.reset_by_source("s"),
            }
            for name, call in calls.items():
                with self.subTest(name):
                    e = InThread(call).result()
                    self.assertIsInstance(e, ReadTimeoutError)
                    self.assertIsInstance(e, TimeoutError)
                    self.assertNotIsInstance(e, LockTimeoutError)

    def test_the_release_of_wait_gives_up(self) -> None:
        # The lock is granted at once; the unlock after it is never answered.
        with FakeServer({1: b"+"}) as server:
            e = InThread(lambda: Client(server.address, read_timeout=0.05).wait("k")).result()
            self.assertIsInstance(e, ReadTimeoutError)
            self.assertTrue(str(e).startswith("unlock "), e)

    def test_lock_has_none(self) -> None:
        hold = threading.Event()
        with FakeServer(b"+", hold=hold) as server:
            c = Client(server.address, read_timeout=0.01)
            lock = InThread(lambda: c.lock("k"))
            self.assertTrue(server.received.wait(10), "the request never arrived")
            lock.thread.join(0.5)  # fifty read timeouts
            self.assertTrue(lock.thread.is_alive(), f"lock returned before its grant: {lock.raised}")
            hold.set()
            self.assertIsNone(lock.result())

if __name__ == "__main__":
    unittest.main()
