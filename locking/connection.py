"""The Redis client the fence lock talks to.

``LOCK_REDIS_URL`` (default: ``REDIS_URL``; see locking/conf.py) picks the deployment:

- ``redis://host:port/db`` (or ``rediss://``): a single server. When it is the ``LOCATION``
  of a django-redis ``default`` cache, the connection pool that django-redis configures is
  reused.
- ``redis+sentinel://host:port[,host:port…]/<service_name>[/db]``: Redis Sentinel; the
  client follows the master through failovers.
- ``redis+cluster://host:port[,host:port…]``: Redis Cluster. Our keys carry a
  ``{resource}`` hash tag, so each script touches a single slot.

Every client gets the short socket timeouts from ``REDIS_SOCKET_TIMEOUT_SECONDS``, so a
dead or partitioned Redis becomes ``LockUnavailable`` quickly instead of a hung worker.
"""

from functools import lru_cache
from urllib.parse import unquote, urlsplit

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry
from redis.sentinel import Sentinel

from locking.conf import setting
from locking.exceptions import LockUnavailable


def no_retries() -> Retry:
    """The lock client never retries a command on its own.

    A retried acquire whose first attempt did run (the reply timed out) would find the
    lease held by our own owner id and answer "busy"; a dead Redis would take seconds of
    backoff to report. One attempt, then ``LockUnavailable``, is the honest answer.
    """
    return Retry(NoBackoff(), 0)


def _hosts(netloc: str, default_port: int) -> list[tuple[str, int]]:
    hosts = []
    for part in netloc.rsplit("@", 1)[-1].split(","):
        host, _, port = part.partition(":")
        hosts.append((host or "127.0.0.1", int(port or default_port)))
    return hosts


def _password(netloc: str) -> str | None:
    if "@" not in netloc:
        return None
    userinfo = netloc.rsplit("@", 1)[0]
    return unquote(userinfo.partition(":")[2] or userinfo) or None


@lru_cache(maxsize=8)
def client_for_url(url: str, timeout: float):
    """Return a (process-wide, fork-safe) Redis client for ``url``."""
    options = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "health_check_interval": 30,
        "retry": no_retries(),
    }
    parts = urlsplit(url)
    if parts.scheme == "redis+sentinel":
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise ValueError("redis+sentinel:// URL needs a service name: …/<service_name>[/db]")
        service = path[0]
        db = int(path[1]) if len(path) > 1 else 0
        password = _password(parts.netloc)
        sentinel = Sentinel(
            _hosts(parts.netloc, 26379),
            sentinel_kwargs={"socket_timeout": timeout, "socket_connect_timeout": timeout},
            **options,
        )
        return sentinel.master_for(service, db=db, password=password)
    if parts.scheme == "redis+cluster":
        nodes = [ClusterNode(host, port) for host, port in _hosts(parts.netloc, 6379)]
        return RedisCluster(
            startup_nodes=nodes,
            password=_password(parts.netloc),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=no_retries(),
        )
    return redis.Redis.from_url(url, **options)


def get_lock_redis():
    """Return the Redis client configured for locks."""
    url = setting("LOCK_REDIS_URL")
    if _is_the_cache(url):
        from django_redis import get_redis_connection

        return get_redis_connection("default")
    try:
        return client_for_url(url, float(setting("REDIS_SOCKET_TIMEOUT_SECONDS")))
    except (RedisError, RedisClusterException) as exc:
        # A Cluster client connects while it is built: an unreachable cluster is an
        # unavailable lock service like any other.
        raise LockUnavailable("*", str(exc) or exc.__class__.__name__) from exc


def _is_the_cache(url: str) -> bool:
    """Whether ``url`` is the Redis of a django-redis ``default`` cache (Django's CACHES)."""
    cache = settings.CACHES.get("default", {})
    return cache.get("BACKEND", "").startswith("django_redis.") and cache.get("LOCATION") == url
