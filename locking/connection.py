"""The Redis clients the fence lock talks to, built from ``LOCK_REDIS_URL`` (else ``REDIS_URL``).

A single server (a django-redis cache's pool reused when the URL is its ``LOCATION``),
``redis+sentinel://`` or ``redis+cluster://`` (a grant that ``WAIT``s runs on the own client
of its slot's node, ``node_client_for``), each with the short socket timeouts of
``LOCK_REDIS_SOCKET_TIMEOUT_SECONDS``. The async client is one per running event loop
(``get_async_lock_redis``; ``aclose_async_lock_redis`` closes the running loop's).
"""

import asyncio
import contextlib
import weakref
from functools import lru_cache
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
from django.conf import settings
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import MovedError, RedisClusterException, RedisError
from redis.retry import Retry
from redis.sentinel import Sentinel

from locking.conf import _ON_CHANGE, setting
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


def async_client_for_url(url: str, timeout: float):
    """Return a new ``redis.asyncio`` client for ``url``, configured as ``client_for_url``."""
    options = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "health_check_interval": 30,
        "retry": AsyncRetry(NoBackoff(), 0),  # never retry on its own: see no_retries()
    }
    parts = urlsplit(url)
    if parts.scheme == "redis+sentinel":
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise ValueError("redis+sentinel:// URL needs a service name: …/<service_name>[/db]")
        sentinel = AsyncSentinel(
            _hosts(parts.netloc, 26379),
            sentinel_kwargs={"socket_timeout": timeout, "socket_connect_timeout": timeout},
            **options,
        )
        db = int(path[1]) if len(path) > 1 else 0
        return sentinel.master_for(path[0], db=db, password=_password(parts.netloc))
    if parts.scheme == "redis+cluster":
        # Unlike the sync client, the async one connects at its first command.
        return AsyncRedisCluster(
            startup_nodes=[AsyncClusterNode(h, p) for h, p in _hosts(parts.netloc, 6379)],
            password=_password(parts.netloc),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=AsyncRetry(NoBackoff(), 0),
        )
    return redis.asyncio.Redis.from_url(url, **options)


# Per running event loop: (url, timeout) -> its redis.asyncio client.
_ASYNC_CLIENTS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = (
    weakref.WeakKeyDictionary()
)


# Per redis.asyncio cluster client: node name -> a plain client of that node.
_ASYNC_NODE_CLIENTS: "weakref.WeakKeyDictionary[AsyncRedisCluster, dict]" = (
    weakref.WeakKeyDictionary()
)


def get_async_lock_redis():
    """Return the ``redis.asyncio`` client for locks of the running event loop."""
    loop = asyncio.get_running_loop()  # RuntimeError outside a coroutine: there is no loop
    key = (setting("LOCK_REDIS_URL"), float(setting("LOCK_REDIS_SOCKET_TIMEOUT_SECONDS")))
    clients = _ASYNC_CLIENTS.setdefault(loop, {})
    client = clients.get(key)
    if client is None:
        client = clients[key] = async_client_for_url(*key)
    return client


async def aclose_async_lock_redis() -> None:
    """Close and forget the running event loop's lock clients (e.g. at ASGI shutdown)."""
    clients = _ASYNC_CLIENTS.pop(asyncio.get_running_loop(), {})
    for client in clients.values():
        for node_client in _ASYNC_NODE_CLIENTS.pop(client, {}).values():
            await node_client.aclose()
        await client.aclose()


# -- Redis Cluster: the node that owns a slot --------------------------------------------


def node_client_for(client, key: str):
    """The client to run a command with ``WAIT`` on for ``key``: on Redis Cluster, the own
    (plain) client of the node that owns the key's slot, whose connection then carries
    the key's write and the ``WAIT`` that counts it; any other client is itself."""
    if isinstance(client, RedisCluster):
        return client.get_redis_connection(client.get_node_from_key(key))
    return client


def moved(client, error: MovedError) -> None:
    """Learn from a node's MOVED answer who owns the slot now (the cluster client's cache)."""
    if isinstance(client, RedisCluster):
        client.nodes_manager.move_slot(error)


def forget_slots(client) -> None:
    """After a node failed to answer, reload the cluster's slots on the next command."""
    if isinstance(client, RedisCluster):
        with contextlib.suppress(RedisError, RedisClusterException):
            client.nodes_manager.initialize()


async def async_node_client_for(client, key: str):
    """``node_client_for`` for a ``redis.asyncio`` client: a ``redis.asyncio.Redis`` of the
    node that owns ``key``'s slot, connecting as the cluster's own connections to it do."""
    if not isinstance(client, AsyncRedisCluster):
        return client
    await client.initialize()  # the async cluster client learns its slots at first use
    node = client.get_node_from_key(key)
    clients = _ASYNC_NODE_CLIENTS.setdefault(client, {})
    found = clients.get(node.name)
    if found is None:
        pool = redis.asyncio.ConnectionPool(
            connection_class=node.connection_class, **node.connection_kwargs
        )
        found = clients[node.name] = redis.asyncio.Redis(connection_pool=pool)
    return found


async def amoved(client, error: MovedError) -> None:
    """``moved`` for a ``redis.asyncio`` cluster client."""
    if isinstance(client, AsyncRedisCluster):
        await client.nodes_manager.move_slot(error)


def get_lock_redis():
    """Return the Redis client configured for locks (one per process, made at first use
    and again after a setting changed)."""
    client = _LOCK_REDIS.get("client")
    if client is None:
        client = _LOCK_REDIS["client"] = _lock_redis()
    return client


def _lock_redis():
    url = setting("LOCK_REDIS_URL")
    if _is_the_cache(url):
        from django_redis import get_redis_connection

        return get_redis_connection("default")
    try:
        return client_for_url(url, float(setting("LOCK_REDIS_SOCKET_TIMEOUT_SECONDS")))
    except (RedisError, RedisClusterException) as exc:
        # A Cluster client connects while it is built: an unreachable cluster is an
        # unavailable lock service like any other.
        raise LockUnavailable("*", str(exc) or exc.__class__.__name__) from exc


# The client get_lock_redis() made: every FenceLock() would otherwise read the settings and
# the cache configuration again. A redis-py client is thread-safe; its pool notices a fork.
_LOCK_REDIS: dict = {}
_ON_CHANGE.append(_LOCK_REDIS.clear)


def _is_the_cache(url: str) -> bool:
    """Whether ``url`` is the Redis of a django-redis ``default`` cache (Django's CACHES)."""
    cache = settings.CACHES.get("default", {})
    return cache.get("BACKEND", "").startswith("django_redis.") and cache.get("LOCATION") == url
