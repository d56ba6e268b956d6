"""Waiting for another process or thread, and loopback ports, for every test module."""

import socket
import time
from collections.abc import Callable


def wait_until(
    predicate: Callable[[], object], *, what: str = "condition", timeout: float = 30
) -> object:
    """Poll ``predicate`` every 10 ms until it returns something truthy, and return that.

    Fails the test after ``timeout`` seconds. Tests force their interleavings with
    barriers and hold points; this is for the other side's progress (a process reaching
    SIGSTOP, a lease expiring), never a sleep that hopes.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def free_port() -> int:
    """A loopback port that nobody listens on now (bound, then released).

    Use it to start a server on, or as a service that is down: a connection to it is
    refused at once.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


closed_port = free_port
