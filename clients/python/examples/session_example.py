"""Sessions of Locking-Center, in brief. Run with lcd listening:

    python3 clients/python/examples/session_example.py localhost:22119
"""

import asyncio
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import lockingcenter  # noqa: E402

address = sys.argv[1] if len(sys.argv) > 1 else "localhost:22119"

# One session, one connection, any number of threads. If this process dies,
# its locks end with the session's TTL (10 s here).
with lockingcenter.Session(address, name="example-report-job", ttl=10) as session:
    # Waits until the key is ours. The fencing token goes with every write
    # to what the lock guards, which refuses a token lower than the highest
    # it has seen.
    with session.lock("reports/daily", lease=30, note="daily report, example") as lk:
        print("holding reports/daily, token", lk.fencing_token)

        with lockingcenter.Session(address, name="example-other") as other:
            # A try that finds the key held is None, not an error.
            if other.try_lock("reports/daily") is None:
                print("reports/daily is busy")
            # A wait that the server bounds.
            try:
                other.acquire("reports/daily", wait=0.5)
            except lockingcenter.LockTimeoutError:
                print("not granted within 0.5 s; the request left the queue")

        if lk.lost.is_set():  # an Event: wait on it, or look now and then
            print("lost:", lk.cause)
    # Released at the end of the block; a lock lost inside it raises
    # LockLostError there.


async def main() -> None:
    # The same with asyncio: many tasks on one session, no thread each.
    async with lockingcenter.AsyncSession(address, name="example-async") as session:
        async with session.lock("reports/daily") as lk:
            print("a task holds reports/daily, token", lk.fencing_token)
        try:
            lk = await asyncio.wait_for(session.acquire("reports/daily"), 5)  # giving up sends CANCEL
        except asyncio.TimeoutError:
            print("gave up")
        else:
            await lk.release()


asyncio.run(main())
