"""locking's pytest plugin: fixtures for testing code that takes fenced leases.

Installed with the wheel as a ``pytest11`` entry point named ``locking.pytest_plugin``
(pytest loads it in every run; ``-p no:locking.pytest_plugin`` turns it off). Where the
wheel is not installed (a checkout of locking), load it by the same name, so that an
installed one is not loaded twice: ``pytest_plugins = ["locking.pytest_plugin"]`` in the
root ``conftest.py``.

The fixtures (helpers of ``locking.testing``; docs/locking/testing.md):

- ``fence_lock``: a ``FenceLock`` on the configured lock Redis.
- ``lease_factory``: grants leases on resources of the test's own, released at teardown.
- ``paused_holder``: a holder granted a lease and paused past it; ``resume(work)`` wakes it.
- ``receiver_client``: posts sealed calls to ``fenced_receiver`` views, returns the verdict.

pytest loads entry-point plugins before pytest-django configures the settings, and a
project may have no Django settings at all: this module imports nothing of Django or
locking; each fixture imports what it needs when a test asks for it.
"""

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from locking import FenceLock
    from locking.testing import LeaseFactory, PausedHolder, ReceiverClient


@pytest.fixture
def fence_lock() -> "FenceLock":
    """A ``FenceLock`` on the lock Redis of the settings (``LOCK_REDIS_URL``)."""
    from locking import FenceLock

    return FenceLock()


@pytest.fixture
def lease_factory(fence_lock: "FenceLock") -> Iterator["LeaseFactory"]:
    """Grants leases: ``lease_factory()`` on a new resource of the test's own,
    ``lease_factory("invoice:7", ttl=...)`` on a given one; those still held are released
    when the test ends. The first grant on a resource records its epoch in the database:
    the test needs database access."""
    from locking.testing import LeaseFactory

    factory = LeaseFactory(fence_lock)
    yield factory
    factory.close()


@pytest.fixture
def paused_holder(lease_factory: "LeaseFactory") -> "Callable[..., PausedHolder]":
    """``paused_holder(resource)``: a holder granted a lease on ``resource`` (a new one of
    the test's own when omitted) and paused past it: the lease has run out in Redis, and
    ``paused.resume(work)`` runs ``work(lease)`` late, in a thread of its own."""
    return lease_factory.paused


@pytest.fixture
def receiver_client() -> "ReceiverClient":
    """Posts sealed calls to ``fenced_receiver`` views through Django's test client:
    ``receiver_client.post(url, payload, token=lease, idempotency_key=...)`` returns the
    ``Delivery`` (``status``, ``verdict``, ``accepted``, ``answer``); ``replay_older(d)``
    sends the same call under a lower token. Signed with ``LOCK_RECEIVER_SECRET`` unless
    ``receiver_client.secret`` or ``secret=`` says otherwise."""
    from locking.testing import ReceiverClient

    return ReceiverClient()
