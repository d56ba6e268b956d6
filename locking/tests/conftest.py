"""Fixtures of locking's own tests. They use the locking app and its test models only.

``fence_lock``, ``lease_factory``, ``paused_holder`` and ``receiver_client`` are locking's
pytest plugin's (locking/pytest_plugin.py): the installed wheel's entry point under make
test-locking-matrix, the checkout's root conftest.py otherwise."""

import os
from pathlib import Path

import pytest

import locking
from locking.conf import setting
from locking.tests.fixtures import async_fence_lock, redis_client  # noqa: F401 (fixtures)
from locking.tests.workers import make_group_scheduler

# Its own project with its own settings: make test-locking-matrix runs it on its own.
collect_ignore = ["example_project"]


def pytest_configure(config):
    """Under make test-locking-matrix, refuse to run against anything but the installed
    wheel: the tests are copied out of the checkout so that ``import locking`` resolves to
    site-packages, and this says so before any test runs."""
    expected = os.environ.get("LOCKING_EXPECT_INSTALLED_IN")
    if expected and not Path(locking.__file__).resolve().is_relative_to(Path(expected).resolve()):
        raise pytest.UsageError(f"locking imported from {locking.__file__}, not from {expected}")


@pytest.fixture
def subprocess_env(transactional_db):
    """Environment for child processes that use the test database and the lock Redis.

    Needs ``transactional_db``: a child has its own connection and cannot see rows inside
    the test's rolled-back transaction. The settings module is the test run's own (pytest
    puts it in the environment).
    """
    from django.db import connection

    db = connection.settings_dict
    env = dict(os.environ)
    env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env["LOCK_REDIS_URL"] = setting("LOCK_REDIS_URL")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.hookimpl(optionalhook=True)  # pytest-xdist may be absent (the wheel's matrix)
def pytest_xdist_make_scheduler(config, log):
    """Modules in an ``xdist_group`` run on one worker (see locking/tests/workers.py)."""
    return make_group_scheduler(config, log)
