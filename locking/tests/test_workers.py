"""Parallel test runs keep their workers apart (locking/tests/workers.py).

Each pytest-xdist worker has its own Redis database on the shared server, its children
inherit it, and a test marked ``private_redis`` acts on a server of its own: its FLUSHALL
cannot empty another worker's database.
"""

import os
import subprocess
import sys

import pytest
import redis

from locking.conf import setting
from locking.tests.workers import (
    ISOLATED_FOR,
    WORKER,
    WorkerIsolationError,
    isolate_redis_databases,
    module_group,
    worker_redis_url,
)


def test_worker_n_moves_the_database_from_base_to_base_plus_n():
    assert worker_redis_url("redis://127.0.0.1:6379/1", 0) == "redis://127.0.0.1:6379/1"
    assert worker_redis_url("redis://127.0.0.1:6379/1", 3) == "redis://127.0.0.1:6379/4"
    assert worker_redis_url("rediss://:pw@h:6380", 2) == "rediss://:pw@h:6380/2"
    # Sentinel and Cluster URLs are the topology tests' own servers: left alone.
    cluster = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"
    assert worker_redis_url(cluster, 5) == cluster


def test_too_many_workers_for_the_servers_databases_is_a_clear_error():
    with pytest.raises(WorkerIsolationError, match="run fewer workers"):
        worker_redis_url("redis://127.0.0.1:6379/1", 15)


def test_isolation_happens_once_so_children_do_not_move_again():
    environ = {
        WORKER: "gw2",
        "REDIS_URL": "redis://127.0.0.1:6379/1",
        "LOCK_REDIS_URL": "redis://127.0.0.1:6380/1",
    }
    isolate_redis_databases(environ)
    moved = dict(environ)
    isolate_redis_databases(environ)  # a child loading the same settings module

    assert moved["REDIS_URL"] == "redis://127.0.0.1:6379/3"
    assert moved["LOCK_REDIS_URL"] == "redis://127.0.0.1:6380/3"
    assert moved[ISOLATED_FOR] == "gw2"
    assert environ == moved


def test_without_xdist_nothing_moves():
    environ = {"REDIS_URL": "redis://127.0.0.1:6379/1"}
    isolate_redis_databases(environ)
    assert environ == {"REDIS_URL": "redis://127.0.0.1:6379/1"}


def test_this_workers_database_is_what_the_settings_and_a_child_use():
    url = setting("LOCK_REDIS_URL")
    if worker := os.environ.get(WORKER):  # under pytest-xdist
        assert os.environ[ISOLATED_FOR] == worker
        assert os.environ["LOCK_REDIS_URL"] == url
    script = "from locking.conf import setting; print(setting('LOCK_REDIS_URL'))"
    child = subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ),  # DJANGO_SETTINGS_MODULE: the run's own
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (child.returncode, child.stdout.strip()) == (0, url), child.stderr


@pytest.fixture
def shared_key():
    """A key in this worker's database on the shared server (read from the environment:
    the autouse ``redis_client`` has already moved the settings to the private one)."""
    client = redis.Redis.from_url(os.environ.get("LOCK_REDIS_URL") or os.environ["REDIS_URL"])
    client.set("workers-test:shared", "still here")
    yield client
    client.delete("workers-test:shared")
    client.close()


@pytest.mark.private_redis
def test_a_private_redis_test_flushes_a_server_of_its_own(shared_key, redis_client, settings):
    kwargs = redis_client.connection_pool.connection_kwargs
    shared = shared_key.connection_pool.connection_kwargs

    redis_client.set("workers-test:private", "1")
    redis_client.flushall()

    assert kwargs["port"] != shared["port"]
    assert setting("LOCK_REDIS_URL") == f"redis://127.0.0.1:{kwargs['port']}/0"
    assert redis_client.dbsize() == 0
    assert shared_key.get("workers-test:shared") == b"still here"


def test_a_module_in_an_xdist_group_is_found_from_its_source(tmp_path):
    grouped = tmp_path / "test_grouped.py"
    grouped.write_text('pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("stack")]\n')
    named = tmp_path / "test_named.py"
    named.write_text('pytestmark = pytest.mark.xdist_group(name="cluster")\n')
    plain = tmp_path / "test_plain.py"
    plain.write_text("def test_nothing():\n    pass\n")

    assert module_group(grouped) == "stack"
    assert module_group(named) == "cluster"
    assert module_group(plain) is None
    assert module_group(tmp_path / "test_missing.py") is None
