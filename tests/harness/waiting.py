"""Waiting for another process or thread, for every test and the fault suite."""

import time
from collections.abc import Callable

from tests.harness import HarnessError


def wait_until(
    predicate: Callable[[], object],
    *,
    what: str = "condition",
    timeout: float = 30,
    interval: float = 0.01,
) -> object:
    """Poll ``predicate`` every ``interval`` seconds until it returns something truthy; return it.

    Raises ``HarnessError`` after ``timeout`` seconds (a test fails with it). Tests force
    their interleavings with barriers and hold points; this is for the other side's
    progress (a process reaching SIGSTOP, a lease expiring), never a sleep that hopes.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise HarnessError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
