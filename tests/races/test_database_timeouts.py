"""PostgreSQL behind a black hole: answered within seconds, not by gunicorn killing a worker.

The connections of hoa/settings.py carry keepalives, ``tcp_user_timeout``, a server-side
``statement_timeout`` and our read timeout (hoa/ops/postgresql/base.py). The kernel's
bounds cannot be shown through a userspace proxy (it acknowledges every byte), so these
tests black-hole the database with the suite's TCP proxy (``stall``: bytes swallowed, the
connection stays open) and require the read timeout to end the wait: an
``OperationalError`` for code, a 503 for a staff page.
"""

import threading
from copy import deepcopy

import pytest
from django.conf import settings
from django.db import OperationalError, connections

from hoa.ops.postgresql.base import DatabaseWrapper
from tests.harness.net import TcpProxy

# A liveness bound, not a speed claim: without the read timeout the wait never ends.
NEVER = 60


@pytest.fixture
def black_hole(transactional_db):
    """A connection of hoa's backend to the test database through a proxy, read timeout 1 s.

    Built directly (not an alias of ``connections``): it is this test's own connection.
    """
    default = connections["default"].settings_dict
    proxy = TcpProxy(int(default["PORT"] or 5432), name="pg", target_host=default["HOST"])
    proxy.start()
    alias_settings = deepcopy(default)
    alias_settings.update(HOST="127.0.0.1", PORT=str(proxy.port))
    alias_settings["OPTIONS"]["read_timeout"] = 1.0
    # Kept open and not health-checked: the stall hits the query, not a connect or a ping.
    alias_settings.update(CONN_MAX_AGE=None, CONN_HEALTH_CHECKS=False)
    wrapper = DatabaseWrapper(alias_settings, alias="black-hole")
    wrapper.inc_thread_sharing()  # used from the test's worker threads
    try:
        yield proxy, wrapper
    finally:
        wrapper.close()
        proxy.stop()


def _run(function) -> dict:
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = function()
        except Exception as exc:  # the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(NEVER)
    assert not thread.is_alive(), "the wait for a black-holed PostgreSQL never ended"
    return outcome


def test_the_settings_bound_every_postgresql_connection():
    options = settings.DATABASES["default"]["OPTIONS"]
    assert settings.DATABASES["default"]["ENGINE"] == "hoa.ops.postgresql"
    assert options["connect_timeout"] >= 1
    assert options["read_timeout"] > 0
    assert options["keepalives"] == 1
    assert options["tcp_user_timeout"] > 0
    assert "statement_timeout=" in options["options"]


def test_a_query_into_a_black_hole_raises_operational_error_and_the_next_one_reconnects(
    black_hole,
):
    proxy, wrapper = black_hole

    def query():
        wrapper.close_if_unusable_or_obsolete()  # what Django does between requests
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone()[0]

    assert _run(query) == {"value": 1}
    proxy.set_mode("stall")
    outcome = _run(query)
    assert isinstance(outcome.get("error"), OperationalError), outcome
    assert "read timeout" in str(outcome["error"])
    proxy.heal()
    assert _run(query) == {"value": 1}


def test_a_commit_into_a_black_hole_raises_and_leaves_no_half_write(black_hole):
    proxy, wrapper = black_hole
    with connections["default"].cursor() as cursor:
        cursor.execute("CREATE TABLE timeout_probe (id int PRIMARY KEY)")

    def write():
        wrapper.set_autocommit(False)
        with wrapper.cursor() as cursor:
            cursor.execute("INSERT INTO timeout_probe VALUES (1), (2)")
        proxy.set_mode("stall")  # the COMMIT goes into the black hole
        wrapper.commit()

    try:
        outcome = _run(write)
        assert isinstance(outcome.get("error"), OperationalError), outcome
        proxy.heal()
        with connections["default"].cursor() as cursor:
            # The COMMIT never reached the server: the closed connection rolled back both.
            cursor.execute("SELECT count(*) FROM timeout_probe")
            assert cursor.fetchone()[0] == 0
    finally:
        with connections["default"].cursor() as cursor:
            cursor.execute("DROP TABLE timeout_probe")
