"""Which Redis the fence lock talks to, with which timeouts; the settings and their defaults."""

from datetime import timedelta

import pytest
import redis
from django_redis import get_redis_connection
from redis.sentinel import SentinelConnectionPool

from locking import FenceLock
from locking.conf import DEFAULTS, setting
from locking.connection import client_for_url, get_lock_redis
from locking.tests.support import closed_port

# Every grant may record a fence epoch in the database (locking/epochs.py).
pytestmark = pytest.mark.django_db


def test_lock_reuses_the_cache_connection_pool_when_the_urls_are_equal(settings):
    url = setting("LOCK_REDIS_URL")
    settings.LOCK_REDIS_URL = url
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}}
    assert get_lock_redis() is get_redis_connection("default")


def test_separate_lock_url_gets_its_own_client_with_the_short_socket_timeouts(
    settings, redis_client
):
    settings.LOCK_REDIS_URL = setting("LOCK_REDIS_URL") + "?client_name=locks"
    settings.LOCK_REDIS_SOCKET_TIMEOUT_SECONDS = 0.75
    client = get_lock_redis()

    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.75, 0.75)
    assert client is get_lock_redis()  # one client (and pool) per process
    # It reaches the same server and database as the test's lock Redis.
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


def forget(settings, *names: str) -> None:
    for name in names:
        if hasattr(settings, name):
            delattr(settings, name)


def test_every_setting_has_a_default(settings):
    forget(settings, "LOCK_REDIS_URL", "REDIS_URL", *DEFAULTS)

    values = {name: setting(name) for name in DEFAULTS}
    assert values == {
        "LOCK_REDIS_SOCKET_TIMEOUT_SECONDS": 2.0,
        "LOCK_REDIS_MIN_REPLICAS": 0,
        "LOCK_REDIS_WAIT_TIMEOUT_MS": 100,
        "LOCK_DATABASE": "default",
        "LOCK_FENCE_EVENT_RETENTION_DAYS": 90,
        "LOCK_CLIENT_IP_CALLABLE": None,
        "LOCK_SCOPES_CALLABLE": "locking.operators.recorded_scopes",
        "LOCK_RECEIVER_SECRET": "",
    }
    assert all(name.startswith("LOCK_") for name in DEFAULTS)
    assert setting("LOCK_REDIS_URL") == "redis://127.0.0.1:6379/0"
    settings.REDIS_URL = "redis://cache.internal:6380/2"
    assert setting("LOCK_REDIS_URL") == "redis://cache.internal:6380/2"


@pytest.mark.parametrize(
    ("name", "project_name", "default"),
    [
        ("LOCK_REDIS_SOCKET_TIMEOUT_SECONDS", "REDIS_SOCKET_TIMEOUT_SECONDS", 2.0),
        ("LOCK_FENCE_EVENT_RETENTION_DAYS", "FENCE_EVENT_RETENTION_DAYS", 90),
    ],
)
def test_a_project_setting_of_the_same_name_without_the_prefix_is_not_locking_s(
    settings, name, project_name, default
):
    """Names without the prefix are the project's (its cache's timeout, say): locking never
    read them in a published version, so it does not read them now."""
    forget(settings, name)
    setattr(settings, project_name, 0.25)

    assert setting(name) == default


def test_lock_url_equal_to_a_cache_that_is_not_django_redis_gets_its_own_client(settings):
    url = setting("LOCK_REDIS_URL")
    settings.LOCK_REDIS_URL = url
    settings.LOCK_REDIS_SOCKET_TIMEOUT_SECONDS = 0.5
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}
    }
    # django-redis could not hand out its pool here: the lock builds a client of its own.
    client = get_lock_redis()
    assert client is client_for_url(url, 0.5)
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 0.5
