"""scripts/locking_matrix.py (``make test-locking-matrix``) runs locking's tests on a Redis of
its own, not on the worktree's, where each pytest-xdist worker of ``make test`` flushes a
database of its own around every test (``gwN``: database 1 + N, locking/tests/workers.py).
On databases 2 and 3 of that server, as it was, a ``make test`` running beside the matrix
emptied a matrix test's keys under it: ``locks break`` in a child process found no lease
("Nothing to break") that the test had just granted.
"""

import runpy
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
MATRIX = runpy.run_path(str(ROOT / "scripts" / "locking_matrix.py"))


def test_the_matrix_runs_on_a_redis_server_of_its_own_and_stops_it(tmp_path):
    worktree = urlsplit(settings.REDIS_URL)  # this test worker's database, on make test's server
    with MATRIX["own_redis"](tmp_path) as url:
        matrix = urlsplit(url)
        assert (matrix.hostname, matrix.path) == ("127.0.0.1", "")
        assert matrix.port != worktree.port
        client = redis.Redis.from_url(f"{url}/1", socket_timeout=2)
        client.set("lock:{job:first}", "held")
        redis.Redis.from_url(settings.REDIS_URL).flushdb()  # what a test worker does, always
        assert client.get("lock:{job:first}") == b"held"
        client.close()

    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()


def test_every_combination_takes_the_quick_start_and_the_page_shows_each_command_it_runs():
    """Issue 45, item 1: nothing ran the quick start as an adopter does, and its first
    ``makemigrations`` failed. Each combination of the matrix runs it in a fresh project
    (scripts/locking_quickstart.py); the manage.py commands the page shows are the ones run,
    in order (a command on the page that the run leaves out fails it)."""
    quickstart = runpy.run_path(str(ROOT / "scripts" / "locking_quickstart.py"))
    assert MATRIX["run_quickstart"] is not None and "quickstart" in MATRIX
    shown = quickstart["shown_commands"](ROOT / "docs" / "locking" / "quickstart.md")
    assert shown == [
        "python manage.py migrate locking",
        "python manage.py check",
        "python manage.py makemigrations yourapp",
        "python manage.py makemigrations --empty yourapp --name invoice_fence_guard",
        "python manage.py migrate",
        "python manage.py check",
        "python manage.py check --database default",
    ]
    djangos = [
        next(r for r in c.requirements if r.lower().startswith(("django=", "django>")))
        for c in MATRIX["COMBINATIONS"]
    ]
    assert djangos == ["Django==5.2", "Django>=6.0,<6.1", "Django>=6.1,<6.2"]
