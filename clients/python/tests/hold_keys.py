"""A process that holds keys until it is killed, for the tests that kill
one: python3 hold_keys.py ADDRESS TTL LOCK_DELAY KEY... opens a session
(TTL seconds), acquires each key with that lock-delay, prints "held" and
the tokens, and sleeps."""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import lockingcenter  # noqa: E402

address, ttl, delay, keys = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
session = lockingcenter.Session(address, name="python-hold-keys", ttl=ttl).open()
print("held", *(session.acquire(k, lock_delay=delay).fencing_token for k in keys), flush=True)
while True:
    time.sleep(60)
