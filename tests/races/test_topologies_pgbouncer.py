"""The fence, the fenced-write flow and advisory locks through a real PgBouncer in
transaction-pooling mode.

PgBouncer (started here on a free port in front of the test PostgreSQL) hands each
*transaction* to whichever server connection is free. Everything the fence relies on lives
inside one transaction — the conditional UPDATE, its row lock, the writes, and
``pg_try_advisory_xact_lock`` — so it must behave exactly as on a direct connection. Every
step below runs in a child process whose ``DATABASE_URL`` points at PgBouncer; the test
checks PgBouncer really carries them. ``make test-pgbouncer`` runs the whole fenced-operation
suite the same way.
"""

import uuid

import psycopg
import pytest
from django.conf import settings as django_settings
from django.db import connection

from hoa.models import Complaint, ComplaintEvent
from locking.advisory import advisory_key
from locking.keys import lock_key
from locking.models import FenceEvent
from tests.harness.waiting import wait_until
from tests.topologies import Child, pgbouncer, require_binary

pytestmark = [
    pytest.mark.django_db(transaction=True),  # children see only committed rows
    # One worker runs the module: its module-scoped PgBouncer starts once, not once per worker.
    pytest.mark.xdist_group("topologies-pgbouncer"),
]


@pytest.fixture(scope="module")
def pgbouncer_binary() -> str:
    binary = require_binary("pgbouncer", "pgbouncer")
    if not binary:
        pytest.skip("pgbouncer not installed (Debian package pgbouncer)")
    return binary


def _server() -> dict:
    database = django_settings.DATABASES["default"]
    return {
        "server_host": database["HOST"],
        "server_port": int(database["PORT"]),
        "user": database["USER"],
    }


@pytest.fixture(scope="module")
def bouncer(pgbouncer_binary):
    with pgbouncer(**_server(), binary=pgbouncer_binary) as running:
        yield running


@pytest.fixture
def bounced_env(subprocess_env, bouncer):
    """A child's environment with every database connection going through PgBouncer."""
    database = connection.settings_dict
    return {
        **subprocess_env,
        "DATABASE_URL": bouncer.database_url(database["NAME"], database["USER"]),
        "DISABLE_SERVER_SIDE_CURSORS": "1",
        "CONN_MAX_AGE": "0",
    }


@pytest.fixture
def children():
    """Start children with ``spawn(...)``; every one is stopped at teardown, pass or fail."""
    started: list[Child] = []

    def spawn(*args, env) -> Child:
        child = Child(*args, env=env)
        started.append(child)
        return child

    yield spawn
    for child in started:
        child.stop()


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Broken gate")


def test_stale_holder_is_rejected_when_every_connection_goes_through_pgbouncer(
    complaint, bounced_env, bouncer, children, redis_client
):
    resource = f"vendor-assignment:complaint:{complaint.pk}"
    test_db = connection.settings_dict["NAME"]
    older = children("fenced-note", resource, complaint.pk, 300, env=bounced_env)
    assert older.expect("granted") == "granted 1"
    # The older holder is paused past its 300 ms lease; a newer one takes over.
    wait_until(lambda: not redis_client.exists(lock_key(resource)), what="the lease to expire")
    newer = children("fenced-note", resource, complaint.pk, 30_000, env=bounced_env)
    assert newer.expect("granted") == "granted 2"

    newer.go()
    assert newer.expect("committed") == "committed 2"
    older.go()
    assert older.expect("stale") == "stale 1 2"
    assert bouncer.clients_of(test_db) >= 2  # both talked to PostgreSQL through PgBouncer
    assert (newer.finish(), older.finish()) == (0, 0)

    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == 2
    assert list(ComplaintEvent.objects.values_list("detail", flat=True)) == ["token 2"]
    events = FenceEvent.objects.for_resource(resource).order_by("id")
    assert [(e.outcome, e.token) for e in events] == [("committed", 2), ("stale", 1)]


def test_older_token_blocked_behind_a_newer_uncommitted_fence_is_rejected_through_pgbouncer(
    complaint, bounced_env, bouncer, children
):
    newer = children("fence", complaint.pk, 6, 1, env=bounced_env)
    newer.expect("fenced")  # holds the row lock in an open transaction
    older = children("fence", complaint.pk, 5, 0, env=bounced_env)
    # PostgreSQL itself shows the older holder's fence waiting for the resource's record.
    wait_until(
        lambda: _backends_waiting_for_a_lock(connection.settings_dict["NAME"]) == 1,
        what="the older holder to block on the resource's record",
    )
    assert bouncer.clients_of(connection.settings_dict["NAME"]) >= 2

    newer.go()
    assert newer.expect("committed") == "committed"
    # Re-checked against the committed record (READ COMMITTED): 5 < 6 no longer passes.
    assert older.expect("stale") == "stale 6"
    assert (newer.finish(), older.finish()) == (0, 0)
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == 6


def _backends_waiting_for_a_lock(database: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
            [database],
        )
        return cursor.fetchone()[0]


def test_transaction_level_advisory_lock_excludes_others_and_ends_at_commit_through_pgbouncer(
    bounced_env, bouncer, children
):
    name = f"scheduled-job:{uuid.uuid4().hex}"
    holder = children("advisory", name, "hold", env=bounced_env)
    assert holder.expect("") == "acquired"

    contender = children("advisory", name, "retry", env=bounced_env)
    assert contender.expect("") == "busy"
    assert contender.expect("ended") == "ended"
    assert bouncer.clients_of(connection.settings_dict["NAME"]) >= 2

    holder.go()
    assert holder.expect("ended") == "ended"
    assert holder.finish() == 0
    # Released at COMMIT: nothing stays behind on the pooled server connection.
    assert _advisory_holders(advisory_key(name)) == []
    contender.go()
    assert contender.expect("") == "acquired"
    assert contender.finish() == 0


def _advisory_holders(key: int) -> list[int]:
    """Backends holding the advisory lock ``key`` (pg_locks splits a bigint key in two)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
            [unsigned >> 32, unsigned & 0xFFFF_FFFF],
        )
        return [row[0] for row in cursor.fetchall()]


def test_session_level_advisory_lock_outlives_its_client_behind_pgbouncer(pgbouncer_binary):
    """Why the project uses only transaction-level advisory locks (docs/operations.md)."""
    key = advisory_key(f"session-level:{uuid.uuid4().hex}")
    database = connection.settings_dict
    # A PgBouncer of its own: stopping it is what finally ends the leaked lock.
    with pgbouncer(**_server(), binary=pgbouncer_binary) as private_bouncer:
        url = private_bouncer.database_url(database["NAME"], database["USER"])
        with psycopg.connect(url, autocommit=True) as client:
            assert client.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0]
        # The client has disconnected; PgBouncer kept the server connection, and the lock.
        assert len(_advisory_holders(key)) == 1
        with psycopg.connect(url, autocommit=True) as another_client:
            assert another_client.execute("SELECT 1").fetchone() == (1,)
        assert len(_advisory_holders(key)) == 1
    wait_until(lambda: _advisory_holders(key) == [], what="the server connection to close")
