"""The lock state a test starts from: an empty lock Redis, no recorded fence epochs and no
receiver's record of an accepted token.

locking's own tests get these fixtures from their conftest; a project's test suite may
import them into its own ``conftest.py``::

    from locking.tests.fixtures import fence_lock, redis_client  # noqa: F401
"""

import pytest
from django.db import connections

from locking import FenceLock
from locking.conf import setting


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


@pytest.fixture(autouse=True)
def redis_client(request, django_db_setup, django_db_blocker):
    """The lock Redis, flushed before and after each test.

    The durable fence epochs go with it: they are what a fresh Redis is checked against,
    so a test that starts from an empty Redis also starts from no recorded epochs. They
    are committed on a connection of their own (see locking/epochs.py), outside any test
    transaction, so they are deleted on one too. Only after a test that had the database:
    no other can have recorded one, and in a run where no test needs it pytest-django sets
    up no test database, so the configured one (a developer's own) must not be touched.
    """
    lock = FenceLock()
    lock.client.flushdb()
    yield lock.client
    lock.client.flushdb()
    uses_database = request.node.get_closest_marker("django_db") is not None
    if uses_database or DATABASE_FIXTURES & set(request.fixturenames):
        with django_db_blocker.unblock():
            forget_fence_epochs()


@pytest.fixture
def fence_lock():
    return FenceLock()
