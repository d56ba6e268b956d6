"""The example project's fixtures: every test starts from an empty lock Redis."""

import os
from pathlib import Path

import django
import pytest

import locking
from locking import FenceLock


def pytest_configure(config):
    """Under make test-locking-matrix: the installed wheel, on the Django it names."""
    installed = os.environ.get("LOCKING_EXPECT_INSTALLED_IN")
    if installed and not Path(locking.__file__).resolve().is_relative_to(Path(installed)):
        raise pytest.UsageError(f"locking imported from {locking.__file__}, not {installed}")
    expected = os.environ.get("EXPECT_DJANGO")
    if expected and ".".join(django.get_version().split(".")[:2]) != expected:
        raise pytest.UsageError(f"Django {django.get_version()}, expected {expected}")


@pytest.fixture(autouse=True)
def lock_redis():
    client = FenceLock().client
    client.flushdb()
    yield client
    client.flushdb()
