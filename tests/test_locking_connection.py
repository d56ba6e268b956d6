"""Which Redis the fence lock talks to, and with which timeouts."""

from datetime import timedelta

import pytest
import redis
from django_redis import get_redis_connection
from redis.sentinel import SentinelConnectionPool

from locking import FenceLock
from locking.connection import client_for_url, get_lock_redis
from tests.harness.net import closed_port

# Every grant may record a fence epoch in the database (locking/epochs.py).
pytestmark = pytest.mark.django_db


def test_lock_reuses_the_cache_connection_pool_when_the_urls_are_equal(settings):
    settings.LOCK_REDIS_URL = settings.REDIS_URL
    assert get_lock_redis() is get_redis_connection("default")


def test_separate_lock_url_gets_its_own_client_with_the_short_socket_timeouts(
    settings, redis_client
):
    settings.LOCK_REDIS_URL = settings.REDIS_URL + "?client_name=locks"
    settings.REDIS_SOCKET_TIMEOUT_SECONDS = 0.75
    client = get_lock_redis()

    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.75, 0.75)
    assert client is get_lock_redis()  # one client (and pool) per process
    # It reaches the same server and database as the test Redis.
    lease = FenceLock().acquire("vendor-assignment:complaint:9", ttl=timedelta(seconds=5))
    assert redis_client.exists("lock:{vendor-assignment:complaint:9}") == 1
    assert lease.release() is True


def test_sentinel_url_names_the_service_database_and_password():
    client = client_for_url("redis+sentinel://:s3cret@10.0.0.1:26380,10.0.0.2/locks/3", 0.5)

    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "locks"
    assert pool.connection_kwargs["db"] == 3
    assert pool.connection_kwargs["password"] == "s3cret"
    assert pool.connection_kwargs["socket_timeout"] == 0.5
    sentinels = [s.connection_pool.connection_kwargs for s in pool.sentinel_manager.sentinels]
    assert [(s["host"], s["port"]) for s in sentinels] == [("10.0.0.1", 26380), ("10.0.0.2", 26379)]


def test_sentinel_url_without_a_service_name_is_refused():
    with pytest.raises(ValueError, match="needs a service name"):
        client_for_url("redis+sentinel://10.0.0.1:26379", 0.5)


def test_plain_url_makes_a_client_with_both_timeouts():
    client = client_for_url("redis://127.0.0.1:1/4", 0.25)
    kwargs = client.connection_pool.connection_kwargs
    assert isinstance(client, redis.Redis)
    assert (kwargs["db"], kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (
        4,
        0.25,
        0.25,
    )


def test_unreachable_cluster_is_lock_unavailable_not_a_library_error(settings):
    from locking import LockUnavailable

    settings.LOCK_REDIS_URL = f"redis+cluster://127.0.0.1:{closed_port()}"
    with pytest.raises(LockUnavailable):
        FenceLock()
