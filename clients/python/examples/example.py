"""Takes a key, works while holding it, and releases it.

    python3 clients/python/examples/example.py [host:port]   (default localhost:22119)
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import lockingcenter  # noqa: E402

address = sys.argv[1] if len(sys.argv) > 1 else "localhost:22119"
client = lockingcenter.Client(address, source="example-report-job")

# Blocks until the key is ours; other holders of the key queue behind us.
with client.locked("reports/daily"):
    print("holding reports/daily")

# A try_lock that loses returns False; failures raise.
if client.try_lock("reports/daily"):
    print("took reports/daily at once")
    client.unlock("reports/daily")
else:
    print("reports/daily is busy")

try:
    client.lock("reports/daily", timeout=2.0)
except lockingcenter.LockTimeoutError:
    print("not granted within 2 s; the request was withdrawn")
else:
    client.unlock("reports/daily")
