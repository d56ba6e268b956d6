"""The partition proxy of locking's tests (locking/tests/support.py) does cut a client off."""

import time
from urllib.parse import urlsplit

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from locking.conf import setting
from locking.tests.support import PartitionProxy

SOCKET_TIMEOUT = 0.5


def test_through_a_partition_a_command_times_out_and_after_heal_it_answers():
    parts = urlsplit(setting("LOCK_REDIS_URL"))
    proxy = PartitionProxy(parts.port or 6379, target_host=parts.hostname or "127.0.0.1")
    client = redis.Redis(
        port=proxy.port, socket_timeout=SOCKET_TIMEOUT, retry=Retry(NoBackoff(), 0)
    )
    try:
        assert client.ping() is True
        proxy.partition()
        started = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            client.ping()
        assert time.monotonic() - started >= SOCKET_TIMEOUT * 0.9
        proxy.heal()
        assert client.ping() is True
    finally:
        client.close()
        proxy.stop()
