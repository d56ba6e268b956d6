"""PostgreSQL advisory locks for scheduled jobs.

``pg_try_advisory_xact_lock`` is transaction-scoped: PostgreSQL releases it at COMMIT or
ROLLBACK, and when the session dies (a killed cron process), so it cannot leak. It is
also safe behind PgBouncer in transaction mode, unlike session-level advisory locks.
"""

import hashlib
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import connections
from django.db.transaction import TransactionManagementError

__all__ = ["advisory_key", "advisory_lock"]


def advisory_key(name: str) -> int:
    """Return the signed 64-bit key for ``name``.

    The first 8 bytes of BLAKE2b(name, digest_size=8), read big-endian as a signed integer:
    stable across processes, hosts and Python versions (unlike ``hash()``, which is
    salted per process by PYTHONHASHSEED).
    """
    if not name:
        raise ValueError("advisory lock name must not be empty")
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextmanager
def advisory_lock(
    name: str, *, using: str = "default", wait: timedelta | None = None
) -> Iterator[bool]:
    """Try to take the transaction-level advisory lock ``name``; yield whether we got it.

    Must run inside ``transaction.atomic()``: the lock lasts until that transaction ends.
    Non-blocking by default; with ``wait`` it polls with jittered backoff until a
    ``time.monotonic()`` deadline (polling keeps the transaction free of lock-wait errors).
    """
    connection = connections[using]
    if not connection.in_atomic_block:
        raise TransactionManagementError(
            "advisory_lock() must run inside transaction.atomic(): the lock is released "
            "when that transaction ends."
        )
    key = advisory_key(name)
    deadline = time.monotonic() + wait.total_seconds() if wait else None
    delay = 0.01
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [key])
            acquired = cursor.fetchone()[0]
            if acquired or deadline is None or time.monotonic() >= deadline:
                break
            time.sleep(min(random.uniform(0, delay), max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 0.5)
    yield acquired
