"""Shared fixtures: personas, real Redis, and the external-endpoint stand-in.

The lock state every test starts from (``redis_client``: the lock Redis, database 1 in
tests, flushed, and no recorded fence epochs) is locking's own fixture; ``fence_lock``,
``lease_factory``, ``paused_holder`` and ``receiver_client`` are locking's pytest plugin's
(loaded by the root conftest.py).

Personas: ``alice`` is staff of Maple Court, ``olivia`` staff of Maple Court and an operator
(leases, tokens, fenced attempts), ``mallory`` staff of Oak Ridge (another association),
``root`` a superuser, ``nobody`` staff of no association.
"""

import os
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, Permission

from hoa.demo import staff_group
from hoa.models import Organization, StaffMembership, Unit
from locking.tests.fixtures import redis_client  # noqa: F401 (fixture)
from locking.tests.workers import make_group_scheduler
from tests.budgets_support import board, budget  # noqa: F401 (fixtures)
from tests.charges_support import dead_redis_url
from tests.harness.http import HttpStub
from tests.harness.processes import django_database_url
from tests.invoices_support import approved, assignment, bob, carol, payments  # noqa: F401
from tests.vendors_support import active_vendor

# Under ``make test-pgbouncer`` a client owns no server backend between its transactions, so
# a test that terminates "the child's backend" would hit whichever client PgBouncer gave it.
direct_postgres_only = pytest.mark.skipif(
    os.environ.get("HOA_VIA_PGBOUNCER") == "1",
    reason="terminates a client's own server backend; behind PgBouncer there is none to kill",
)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Personas are created in almost every test; the production hasher is slow on purpose."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def maple(db):
    org = Organization.objects.create(name="Maple Court", slug="maple-court")
    for number in range(1, 11):
        Unit.objects.create(
            organization=org, label=f"M{number:03d}", monthly_assessment=Decimal("200.00") + number
        )
    return org


@pytest.fixture
def oak(db):
    org = Organization.objects.create(name="Oak Ridge", slug="oak-ridge")
    for number in range(1, 6):
        Unit.objects.create(organization=org, label=f"O{number:03d}", monthly_assessment=300)
    return org


@pytest.fixture
def staff_permissions(db) -> Group:
    return staff_group()


def _staff(django_user_model, username, organization, group):
    user = django_user_model.objects.create_user(username=username, password="pw-" + username)
    user.is_staff = True
    user.save()
    if group is not None:
        user.groups.add(group)
    if organization is not None:
        StaffMembership.objects.create(user=user, organization=organization)
    return user


@pytest.fixture
def alice(django_user_model, maple, staff_permissions):
    return _staff(django_user_model, "alice", maple, staff_permissions)


@pytest.fixture
def mallory(django_user_model, oak, staff_permissions):
    return _staff(django_user_model, "mallory", oak, staff_permissions)


@pytest.fixture
def olivia(django_user_model, maple, staff_permissions):
    """An operator: staff of Maple Court who also reads leases, tokens and the fenced
    attempts (locking's permissions), and may break a lease."""
    user = _staff(django_user_model, "olivia", maple, staff_permissions)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="locking", codename__in=["view_fenceevent", "break_lease"]
        )
    )
    return user


@pytest.fixture
def nobody(django_user_model, staff_permissions):
    return _staff(django_user_model, "nobody", None, staff_permissions)


@pytest.fixture
def viewer(django_user_model, maple):
    """Staff of Maple Court without the permissions to run fenced operations."""
    return _staff(django_user_model, "viewer", maple, None)


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password="pw-root")


@pytest.fixture
def http_stub():
    stub = HttpStub().start()
    yield stub
    stub.stop()


@pytest.fixture
def pipe(maple):
    """A vendor with a contract with Maple Court that covers today."""
    return active_vendor("Pipe Pros", maple)


@pytest.fixture
def green(maple):
    """A second such vendor, for races and reassignments."""
    return active_vendor("Evergreen", maple)


@pytest.fixture
def dispatch(http_stub, settings):
    """The vendor dispatch endpoint, pointed at the stand-in."""
    settings.VENDOR_DISPATCH_URL = http_stub.url_for("dispatch")
    return http_stub


@pytest.fixture
def billing(http_stub, settings):
    """The billing endpoint, pointed at the stand-in."""
    settings.BILLING_WEBHOOK_URL = http_stub.url_for("billing")
    return http_stub


@pytest.fixture
def dead_cache(settings):
    """The cache (the rate counters, the sessions' cached copies) on a Redis that refuses
    connections; the lock keeps its own Redis (LOCK_REDIS_URL), which is up."""
    settings.REDIS_URL = dead_redis_url()
    settings.CACHES = {
        "default": {
            **settings.CACHES["default"],
            "LOCATION": settings.REDIS_URL,
            "OPTIONS": {
                **settings.CACHES["default"]["OPTIONS"],
                "SOCKET_CONNECT_TIMEOUT": 0.5,
                "SOCKET_TIMEOUT": 0.5,
            },
        }
    }


@pytest.fixture
def subprocess_env(transactional_db, settings):
    """Environment for child processes (commands, workers) that use the test database.

    Needs ``transactional_db``: a child process has its own connection and cannot see
    rows inside the test's rolled-back transaction.
    """
    env = dict(os.environ)
    env["DATABASE_URL"] = django_database_url()
    env["REDIS_URL"] = settings.REDIS_URL
    env["LOCK_REDIS_URL"] = settings.LOCK_REDIS_URL
    env["PYTHONUNBUFFERED"] = "1"
    return env


def pytest_runtest_setup(item):
    """Start each test on a live database connection, even if the last one lost its own.

    The project's read timeout (hoa.ops.postgresql) closes a connection that waited too
    long. Django reconnects at the next request, but a test worker has no requests between
    tests: without this, one slow statement on a loaded machine would fail every later test
    of that worker with "the connection is closed" instead of failing once.
    """
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and connection.connection.closed:
            # Closed inside pytest-django's atomic block, whose rollback then failed: the
            # block is gone with the connection, so forget it and let close() drop it.
            connection.in_atomic_block = False
            connection.savepoint_ids = []
            connection.needs_rollback = False
            connection.closed_in_transaction = False
            connection.close()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist may be absent (the wheel's matrix)
def pytest_xdist_make_scheduler(config, log):
    """Modules in an ``xdist_group`` run on one worker (see locking/tests/workers.py)."""
    return make_group_scheduler(config, log)
