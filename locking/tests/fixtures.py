"""The lock state a test starts from: an empty lock Redis, no recorded fence epochs and no
receiver's record of an accepted token.

locking's own tests get these fixtures from their conftest; the platform's test suite
imports them into its own ``conftest.py``::

    from locking.tests.fixtures import async_fence_lock, redis_client  # noqa: F401

``fence_lock`` (and the lease factory, the paused holder and the receiver client) are the
pytest plugin's, locking/pytest_plugin.py, which every project gets with the wheel.
"""

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from django.db import connections

from locking import FenceLock
from locking.asyncio import AsyncFenceLock
from locking.conf import setting
from locking.tests.support import PrivateRedis


def forget_fence_epochs(using: str | None = None) -> None:
    """Delete every recorded fence epoch, and every receiver's record of the tokens it
    accepted (tokens start again at 1 with them), on a connection outside any test
    transaction."""
    connection = connections.create_connection(using or setting("LOCK_DATABASE"))
    try:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM locking_fenceepoch")
            cursor.execute("DELETE FROM locking_receivedcall")
    finally:
        connection.close()


# pytest-django's ways of giving a test the database.
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "live_server"}


@contextmanager
def private_lock_redis(settings, directory: Path) -> Iterator[PrivateRedis]:
    """A redis-server of the test's own, made the lock Redis (and the cache, where the
    settings point both at one server) while the block runs, then stopped by its pid.

    ``settings``: pytest-django's fixture, which puts the settings back after the test.
    Tests get it with ``@pytest.mark.private_redis`` (``redis_client``): a test that acts
    on the whole server (FLUSHALL, CONFIG SET, DEBUG SLEEP, counting commands in INFO,
    SIGSTOP or a restart) must not do so on the shared one, where the other pytest-xdist
    workers keep their own databases (``locking/tests/workers.py``). Children built from
    ``subprocess_env`` follow the settings, so they use it too.
    """
    server = PrivateRedis(directory)
    try:
        shared = setting("LOCK_REDIS_URL")
        settings.LOCK_REDIS_URL = server.url
        if getattr(settings, "REDIS_URL", None) == shared:
            settings.REDIS_URL = server.url
        cache = getattr(settings, "CACHES", {}).get("default", {})
        if cache.get("LOCATION") == shared:
            settings.CACHES = {**settings.CACHES, "default": {**cache, "LOCATION": server.url}}
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def redis_client(request, django_db_setup, django_db_blocker):
    """The lock Redis, flushed before and after each test: this pytest-xdist worker's own
    database on the shared server, or, for a test marked ``private_redis``, a server of
    its own (``private_lock_redis``).

    The durable fence epochs go with it: they are what a fresh Redis is checked against,
    so a test that starts from an empty Redis also starts from no recorded epochs. They
    are committed on a connection of their own (see locking/epochs.py), outside any test
    transaction, so they are deleted on one too. Only after a test that had the database:
    no other can have recorded one, and in a run where no test needs it pytest-django sets
    up no test database, so the configured one (a developer's own) must not be touched.
    """
    with ExitStack() as stack:
        if request.node.get_closest_marker("private_redis"):
            settings = request.getfixturevalue("settings")
            directory = request.getfixturevalue("tmp_path_factory").mktemp("private-redis")
            stack.enter_context(private_lock_redis(settings, directory))
        lock = FenceLock()
        lock.client.flushdb()
        yield lock.client
        lock.client.flushdb()
    uses_database = request.node.get_closest_marker("django_db") is not None
    if uses_database or DATABASE_FIXTURES & set(request.fixturenames):
        with django_db_blocker.unblock():
            forget_fence_epochs()


@pytest.fixture
def async_fence_lock():
    """The async lock on the same Redis (the running event loop's client of it)."""
    return AsyncFenceLock()
