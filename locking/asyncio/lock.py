"""The fence lock for async code: ``FenceLock``'s grants on a ``redis.asyncio`` client.

The same steps as locking/lock.py, awaiting Redis and the database: one grant script (one
text, one SHA with the sync lock's), a new epoch recorded in the database first when Redis
has no counter (``sync_to_async(thread_sensitive=True)``, locking/epochs.py), and with
``min_replicas`` the grant and a ``WAIT`` in one pipeline. What a reply means, and how long
to wait after one, is read with the sync lock's functions (locking/scripts.py).

A ``redis.asyncio`` connection belongs to the event loop that opened it, so the client is
the one given (``AsyncFenceLock(client)``) or the running loop's own, built from the same
settings as the sync one (locking/connection.py): one ``AsyncFenceLock`` serves any loop.
"""

import asyncio
import contextlib
import logging
import time
from datetime import timedelta

import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import MovedError, NoScriptError, RedisClusterException, RedisError

from locking import tracing
from locking.asyncio.lease import AsyncLease
from locking.conf import setting
from locking.connection import amoved, async_node_client_for, get_async_lock_redis
from locking.epochs import astart_epoch
from locking.exceptions import LockHeld, LockUnavailable
from locking.keys import fence_key, holder_label, new_owner, positive_ms, ttl_of, validate_resource
from locking.lease import AuditHook
from locking.lock import log_reseed, replica_rule
from locking.scripts import (
    ACQUIRE_LUA,
    UNSEEDABLE,
    Scripts,
    backoff_seconds,
    busy,
    epoch_cause,
    grant_keys_args,
    scripts_for,
    seed_poll_seconds,
    text,
    unavailable,
    unconfirmed,
)

logger = logging.getLogger(__name__)

# What redis.asyncio raises when Redis cannot be reached or answer: the lock is unavailable.
REDIS_ERRORS = (RedisError, RedisClusterException)


class AsyncFenceLock:
    """Grants leases with fencing tokens on Redis, for async code.

    ``AsyncFenceLock()`` uses the running event loop's client for ``LOCK_REDIS_URL``; pass
    ``client`` (a ``redis.asyncio`` client) to use another. ``using``, ``min_replicas`` and
    ``replica_timeout`` are ``FenceLock``'s. ``await lock.acquire(…)`` grants an
    ``AsyncLease``, whose ``release``, ``extend`` and ``keep_alive`` are async too.
    """

    __slots__ = ("__weakref__", "_client", "min_replicas", "replica_timeout_ms", "using")

    def __init__(
        self,
        client: "redis.asyncio.Redis | AsyncRedisCluster | None" = None,
        *,
        using: str | None = None,
        min_replicas: int | None = None,
        replica_timeout: timedelta | None = None,
    ):
        self._client = client
        self.using = using or setting("LOCK_DATABASE")
        self.min_replicas, self.replica_timeout_ms = replica_rule(min_replicas, replica_timeout)

    @property
    def client(self) -> "redis.asyncio.Redis | AsyncRedisCluster":
        """The ``redis.asyncio`` client: the one given, else the running loop's own."""
        return self._client if self._client is not None else get_async_lock_redis()

    @property
    def scripts(self) -> Scripts:
        """The lock's scripts on its client (the running loop's, unless one was given)."""
        return scripts_for(self.client)

    async def acquire(
        self,
        resource: str,
        *,
        ttl: timedelta,
        wait: timedelta | None = None,
        holder: str = "",
        audit: AuditHook | None = None,
    ) -> AsyncLease:
        """``FenceLock.acquire`` for async code: a lease on ``resource`` with a new fencing
        token, or ``LockHeld``; with ``wait``, retried with jittered backoff until then.

        Recording a new epoch (a resource's first grant, a counter Redis lost) is a
        database write: it runs in ``sync_to_async(thread_sensitive=True)``.
        """
        validate_resource(resource)
        ttl_ms = positive_ms(ttl)
        label = holder_label(holder)
        deadline = time.monotonic() + wait.total_seconds() if wait else None
        with tracing.operation_span("locking.acquire", resource) as span:
            attempt = 0
            while True:
                try:
                    lease = await self._try_acquire(resource, ttl_ms, label, audit)
                except LockHeld:
                    remaining = deadline - time.monotonic() if deadline is not None else 0
                    if remaining <= 0:
                        raise
                    await asyncio.sleep(backoff_seconds(attempt, remaining))
                    attempt += 1
                else:
                    span.set_attribute(tracing.FENCE_TOKEN, lease.token)
                    return lease

    async def _try_acquire(
        self, resource: str, ttl_ms: int, label: str, audit: AuditHook | None
    ) -> AsyncLease:
        # The steps of FenceLock._try_acquire, awaiting Redis and the database.
        owner = new_owner()
        started = time.monotonic()
        reply = await self._grant(resource, owner, ttl_ms, label, floor="")
        while reply[0] == 3:
            await asyncio.sleep(seed_poll_seconds(reply))
            started = time.monotonic()
            reply = await self._grant(resource, owner, ttl_ms, label, floor="")
        if reply[0] == 2:
            floor = await astart_epoch(
                resource, above=int(reply[2] or 0), using=self.using, cause=epoch_cause(reply)
            )
            reply = await self._grant(resource, owner, ttl_ms, label, floor=str(floor))
            if reply[0] == 2:
                raise LockUnavailable(resource, UNSEEDABLE)
        if reply[0] != 1:
            raise busy(resource, reply)
        return AsyncLease(
            resource=resource,
            token=int(reply[1]),
            owner=owner,
            value=reply[2],
            lock=self,
            ttl=ttl_of(ttl_ms),
            started=started,
            expires_ms=int(reply[3]) + ttl_ms,
            audit=audit,
        )

    async def _grant(self, resource: str, owner: str, ttl_ms: int, label: str, *, floor: str):
        """``FenceLock._grant`` on the async client: the same script, the same replica rule."""
        keys, args = grant_keys_args(resource, owner, ttl_ms, label, floor)
        scripts = self.scripts
        try:
            if not self.min_replicas:
                return await scripts.acquire(keys=keys, args=args)
            reply, confirmed = await self._grant_and_wait(keys, args)
        except REDIS_ERRORS as exc:
            raise unavailable(resource, exc) from exc
        if reply[0] == 1 and confirmed < self.min_replicas:
            with contextlib.suppress(*REDIS_ERRORS):
                await scripts.release(keys=[keys[0]], args=[text(reply[2])])
            raise unconfirmed(
                resource,
                reply,
                confirmed,
                min_replicas=self.min_replicas,
                timeout_ms=self.replica_timeout_ms,
            )
        return reply

    async def _grant_and_wait(self, keys: tuple, args: list) -> tuple[list, int]:
        # As FenceLock._grant_and_wait: on Cluster, a plain pipeline on the slot owner's own
        # client (WAIT counts the writes of its connection only).
        client = self.client
        for _ in range(3):
            node = await async_node_client_for(client, keys[0])
            pipe = node.pipeline(transaction=False)
            pipe.evalsha(scripts_for(client).acquire.sha, len(keys), *keys, *args)
            pipe.wait(self.min_replicas, self.replica_timeout_ms)
            reply, confirmed = await pipe.execute(raise_on_error=False)
            if isinstance(reply, MovedError):
                await amoved(client, reply)
                continue
            if isinstance(reply, NoScriptError):
                await node.script_load(ACQUIRE_LUA)  # a restarted Redis forgot it
                continue
            for result in (reply, confirmed):
                if isinstance(result, Exception):
                    raise result
            return reply, int(confirmed)
        raise LockUnavailable(keys[0], "the grant script could not be run on the slot's owner")

    async def current_token(self, resource: str) -> int:
        """Return the fence counter of ``resource`` (0 if Redis has none)."""
        validate_resource(resource)
        try:
            raw = await self.client.get(fence_key(resource))
        except REDIS_ERRORS as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        return int(raw) if raw is not None else 0

    async def reseed(self, resource: str, at_least: int) -> int:
        """Raise the fence counter of ``resource`` to at least ``at_least``; never lower it."""
        validate_resource(resource)
        try:
            script = self.scripts.reseed
            counter = int(await script(keys=[fence_key(resource)], args=[int(at_least)]))
        except REDIS_ERRORS as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        log_reseed(resource, counter)
        return counter
