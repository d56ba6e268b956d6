"""The async half of the lock and the lease, on ``redis.asyncio`` (as redis-py splits
``redis/lock.py`` from ``redis/asyncio/lock.py``).

``FenceLock`` and ``Lease`` take these methods from the two mixins here, so one object
serves sync and async callers alike (``FenceLock().aacquire``, ``lease.arelease``): the
same script constants (one text, one SHA), the same answers, the same grant order — a
new epoch is recorded in the database first (locking/epochs.py, through
``sync_to_async(thread_sensitive=True)``), then the grant. What a grant's reply means is
shared with the sync lock (locking/scripts.py); the mixins use the concrete classes'
``client``, ``min_replicas`` and ``replica_timeout_ms`` (``FenceLock``) and their
state (``Lease._tenure``: locking/tenure.py).

A ``redis.asyncio`` connection belongs to the event loop that opened it, so the client is
the one given (``FenceLock(async_client=…)``) or the running loop's own
(locking/connection.py).
"""

import asyncio
import contextlib
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from redis.exceptions import MovedError, NoScriptError, RedisClusterException, RedisError

from locking import tracing
from locking.connection import amoved, async_node_client_for, get_async_lock_redis
from locking.epochs import astart_epoch
from locking.exceptions import LeaseLost, LockHeld, LockUnavailable
from locking.keys import fence_key, holder_label, lock_key, new_owner, validate_resource
from locking.outcomes import LeaseState
from locking.scripts import (
    ACQUIRE_LUA,
    UNSEEDABLE,
    Scripts,
    backoff_seconds,
    epoch_cause,
    grant_keys_args,
    scripts_for,
    seed_poll_seconds,
    text,
    unavailable,
    unconfirmed,
)
from locking.tenure import positive_ms

if TYPE_CHECKING:
    from locking.lease import Lease
    from locking.tenure import AuditHook

logger = logging.getLogger(__name__)


class AsyncFenceLockMixin:
    """``FenceLock``'s async methods: grants and the counter on ``redis.asyncio``."""

    __slots__ = ()  # FenceLock has slots

    @property
    def async_client(self):
        """The ``redis.asyncio`` client: the one given, else the running loop's own."""
        if self._async_client is not None:
            return self._async_client
        if self._client_given:
            raise TypeError(
                "FenceLock(client=...) uses its own Redis: pass async_client= too for the "
                "async methods, or they would lock on another server."
            )
        return get_async_lock_redis()

    def async_scripts(self) -> Scripts:
        """The lock's scripts on its async client (the running loop's, unless given)."""
        return scripts_for(self.async_client)

    async def aacquire(
        self,
        resource: str,
        *,
        ttl: timedelta,
        wait: timedelta | None = None,
        holder: str = "",
        audit: "AuditHook | None" = None,
    ) -> "Lease":
        """``acquire()`` for async code: the same scripts and answers, on ``redis.asyncio``.

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
                    lease = await self._atry_acquire(resource, ttl_ms, label, audit)
                except LockHeld:
                    remaining = deadline - time.monotonic() if deadline is not None else 0
                    if remaining <= 0:
                        raise
                    await asyncio.sleep(backoff_seconds(attempt, remaining))
                    attempt += 1
                else:
                    span.set_attribute(tracing.FENCE_TOKEN, lease.token)
                    return lease

    async def _atry_acquire(self, resource: str, ttl_ms: int, label: str, audit) -> "Lease":
        # The same steps as _try_acquire, awaiting Redis and the database.
        owner = new_owner()
        started = time.monotonic()
        reply = await self._agrant(resource, owner, ttl_ms, label, floor="")
        while reply[0] == 3:
            await asyncio.sleep(seed_poll_seconds(reply))
            started = time.monotonic()
            reply = await self._agrant(resource, owner, ttl_ms, label, floor="")
        if reply[0] == 2:
            floor = await astart_epoch(
                resource, above=int(reply[2] or 0), using=self.using, cause=epoch_cause(reply)
            )
            reply = await self._agrant(resource, owner, ttl_ms, label, floor=str(floor))
            if reply[0] == 2:
                raise LockUnavailable(resource, UNSEEDABLE)
        return self._lease_or_busy(resource, reply, owner, ttl_ms, started, audit)

    async def _agrant(
        self, resource: str, owner: str, ttl_ms: int, label: str, *, floor: str
    ) -> list:
        """``_grant`` on the async client: the same script, the same replica rule."""
        keys, args = grant_keys_args(resource, owner, ttl_ms, label, floor)
        scripts = self.async_scripts()
        try:
            if not self.min_replicas:
                return await scripts.acquire(keys=keys, args=args)
            reply, confirmed = await self._agrant_and_wait(keys, args)
        except (RedisError, RedisClusterException) as exc:
            raise unavailable(resource, exc) from exc
        if reply[0] == 1 and confirmed < self.min_replicas:
            with contextlib.suppress(RedisError, RedisClusterException):
                await scripts.release(keys=[keys[0]], args=[text(reply[2])])
            raise unconfirmed(
                resource,
                reply,
                confirmed,
                min_replicas=self.min_replicas,
                timeout_ms=self.replica_timeout_ms,
            )
        return reply

    async def _agrant_and_wait(self, keys: list, args: list) -> tuple[list, int]:
        # As _grant_and_wait: on Cluster, a plain pipeline on the slot owner's own client.
        for _ in range(3):
            client = await async_node_client_for(self.async_client, keys[0])
            pipe = client.pipeline(transaction=False)
            pipe.evalsha(self.scripts.acquire.sha, len(keys), *keys, *args)
            pipe.wait(self.min_replicas, self.replica_timeout_ms)
            reply, confirmed = await pipe.execute(raise_on_error=False)
            if isinstance(reply, MovedError):
                await amoved(self.async_client, reply)
                continue
            if isinstance(reply, NoScriptError):
                await client.script_load(ACQUIRE_LUA)  # a restarted Redis forgot it
                continue
            for result in (reply, confirmed):
                if isinstance(result, Exception):
                    raise result
            return reply, int(confirmed)
        raise LockUnavailable(keys[0], "the grant script could not be run on the slot's owner")

    async def acurrent_token(self, resource: str) -> int:
        """``current_token()`` on the async client."""
        validate_resource(resource)
        try:
            raw = await self.async_client.get(fence_key(resource))
        except (RedisError, RedisClusterException) as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        return int(raw) if raw is not None else 0

    async def areseed(self, resource: str, at_least: int) -> int:
        """``reseed()`` on the async client."""
        validate_resource(resource)
        try:
            script = self.async_scripts().reseed
            counter = int(await script(keys=[fence_key(resource)], args=[int(at_least)]))
        except (RedisError, RedisClusterException) as exc:
            raise LockUnavailable(resource, str(exc)) from exc
        self._reseeded(resource, counter)
        return counter


class AsyncLeaseMixin:
    """``Lease``'s async methods: release, extend, keep alive, on the lock's async client."""

    __slots__ = ()  # Lease has slots

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.arelease()

    async def arelease(self) -> bool:
        """``release()`` for async code, on the lock's ``redis.asyncio`` client."""
        self._tenure.end()
        with tracing.operation_span("locking.release", self.resource, token=self.token) as span:
            try:
                script = self._lock.async_scripts().release
                released = bool(await script(keys=[lock_key(self.resource)], args=[self._value]))
            except (RedisError, RedisClusterException) as exc:
                logger.warning(
                    "could not release lease; it will expire",
                    extra={"resource": self.resource, "token": self.token, "error": str(exc)},
                )
                released = False
            span.set_attribute(tracing.RELEASED, released)
        return released

    async def aextend(self, ttl: timedelta) -> bool:
        """``extend()`` for async code, on the lock's ``redis.asyncio`` client."""
        ttl_ms = positive_ms(ttl)
        if self.state is LeaseState.LOST:
            return False
        started = time.monotonic()
        try:
            script = self._lock.async_scripts().extend
            extended = bool(
                await script(keys=[lock_key(self.resource)], args=[self._value, ttl_ms])
            )
        except (RedisError, RedisClusterException) as exc:
            return self._tenure.renewed(False, ttl, started, error=exc)
        return self._tenure.renewed(extended, ttl, started)

    def akeep_alive(
        self, ttl: timedelta | None = None, *, cancel: bool = False
    ) -> "AsyncKeepAlive":
        """``keep_alive()`` for async code: an asyncio task extends the lease every ttl/3.

        ``async with lease.akeep_alive(cancel=True):`` also cancels the task running the
        block the moment the lease is ``LOST`` (not while it is only ``UNCERTAIN``), and
        the block then ends with ``LeaseLost`` (as ``asyncio.timeout()`` ends one with
        ``TimeoutError``). Cancellation stops the
        awaiting, not work already handed to a thread: a fenced commit running in
        ``sync_to_async`` finishes or is refused by the fence, as without cancellation.
        """
        return AsyncKeepAlive(self, self._tenure.renewal_ttl(ttl), cancel=cancel)


class AsyncKeepAlive:
    """Renewal of a lease by an asyncio task; with ``cancel``, a loss cancels the block.

    As ``KeepAlive``: a renewal that fails leaves the lease ``UNCERTAIN`` and the task
    trying again (the block goes on: ``lease.check()`` is what stops an external call); a
    refusal, or the TTL surely passing, makes it ``LOST``, and only that cancels.

    The renewal is stopped with an event and awaited, never cancelled: a cancellation that
    lands inside a ``redis.asyncio`` command can be swallowed by the client (redis-py 8.1
    turns some into a retry of the loop or a ``ConnectionError``), which would leave the
    renewal running after the block.
    """

    def __init__(self, lease: "Lease", ttl: timedelta, *, cancel: bool):
        self.lease = lease
        self.ttl = ttl
        self.cancel = cancel
        self._task: asyncio.Task | None = None  # the task running the block
        self._cancelling = 0
        self._renewal: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self._cancelled_by_us = False

    async def __aenter__(self) -> "Lease":
        self._task = asyncio.current_task()
        self._cancelling = self._task.cancelling() if self._task else 0
        self._renewal = asyncio.create_task(self._run(), name=f"keep-alive {self.lease.resource}")
        return self.lease

    async def __aexit__(self, exc_type, exc, traceback) -> None:
        self._stop.set()
        await self._renewal  # at most one extend in flight, bounded by the socket timeout
        if not self._cancelled_by_us:
            return
        # Our cancellation, and no one else's: answer it as the loss it stands for. (A
        # block that finished anyway, its cancellation swallowed on the way, stands.)
        if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            lease = self.lease
            raise LeaseLost(lease.resource, lease.token, lease.lost.reason) from exc

    async def _run(self) -> None:
        lease = self.lease
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), lease._tenure.renewal_pause(self.ttl))
                return  # the block ended
            except TimeoutError:
                pass
            if lease.state is not LeaseState.LOST and await lease.aextend(self.ttl):
                continue
            if lease.state is not LeaseState.LOST:
                continue  # uncertain: try again soon, the block goes on
            logger.warning(
                "lease lost during keep-alive",
                extra={"resource": lease.resource, "token": lease.token},
            )
            # While the block is exiting there is nothing left to stop.
            if self.cancel and not self._stop.is_set() and self._task is not None:
                self._cancelled_by_us = True
                self._task.cancel(f"lease on {self.lease.resource} lost")
            return
