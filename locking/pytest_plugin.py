"""locking's pytest plugin: the ``fence_lock``, ``lease_factory``, ``paused_holder`` and
``receiver_client`` fixtures (helpers of ``locking.testing``).

Installed with the wheel as the ``pytest11`` entry point ``locking.pytest_plugin``; from a
checkout, ``pytest_plugins = ["locking.pytest_plugin"]``. It imports nothing of Django or
locking at import (pytest loads it before the settings). The documentation's 'Testing your
code' page.
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
