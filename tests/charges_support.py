"""Helpers shared by the tests/test_charges_*.py files: threads, waits and pausing points."""

import threading
from collections.abc import Callable
from datetime import date

from django.db import connection

from charges.operations import charge_resource
from locking.keys import lock_key
from tests.harness.net import closed_port
from tests.harness.waiting import wait_until

MONTH = date(2026, 3, 1)
MONTH_ARG = "2026-03"


def wait_for_lease_expiry(redis_client, organization, month: date = MONTH) -> None:
    """Wait until the lease on ``organization``'s charges for ``month`` has run out."""
    key = lock_key(charge_resource(organization, month))
    wait_until(lambda: not redis_client.exists(key), what=f"{key} to expire")


class Worker:
    """Run ``fn`` in a thread with its own database connection; keep its result or error."""

    def __init__(self, fn: Callable[[], object], *, barrier: threading.Barrier | None = None):
        self.result = None
        self.error: BaseException | None = None
        self.done = threading.Event()

        def target():
            try:
                if barrier is not None:
                    barrier.wait()
                self.result = fn()
            except BaseException as exc:  # handed to the test, which asserts on it
                self.error = exc
            finally:
                connection.close()
                self.done.set()

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def join(self, timeout: float = 30):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker thread did not finish"
        return self


def waiting_statements(prefix: str) -> int:
    """Count backends of this test database blocked on a lock while running ``prefix…``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            [prefix + "%"],
        )
        return cursor.fetchone()[0]


def dead_redis_url() -> str:
    """A Redis URL on a local port where nothing listens (connection refused at once)."""
    return f"redis://127.0.0.1:{closed_port()}/0"
