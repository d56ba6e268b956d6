"""A granted lease, async: release, extend, keep alive on ``redis.asyncio``.

``AsyncFenceLock.acquire`` (locking/asyncio/lock.py) grants an ``AsyncLease``. It is the
sync ``Lease`` of locking/lease.py with ``await`` where that one blocks: the same scripts,
and the same ``LeaseLife`` told what Redis answered (``state``, ``check()``, ``lost``,
``on_lost`` are the ``BaseLease``'s of locking/lease.py). Its keep-alive is an asyncio task
that can also cancel the block it guards once the lease is lost.
"""

import asyncio
import logging
import time
from datetime import timedelta
from types import TracebackType
from typing import Protocol, Self

import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import RedisClusterException, RedisError

from locking import tracing
from locking.exceptions import LeaseLost
from locking.keys import lock_key, positive_ms
from locking.lease import AnyGrantingLock, BaseLease
from locking.outcomes import LeaseState
from locking.scripts import Scripts

# The lease's own log, as the sync lease's (operators filter on one name).
logger = logging.getLogger("locking.lease")


class AsyncGrantingLock(AnyGrantingLock, Protocol):
    """What an async lease uses of the ``AsyncFenceLock`` that granted it: its client and
    scripts (the running loop's, resolved at each call), its database. (A protocol, not
    the class: the lock imports this module, so this one does not import the lock.)"""

    @property
    def client(self) -> "redis.asyncio.Redis | AsyncRedisCluster": ...

    @property
    def scripts(self) -> Scripts: ...


class AsyncLease(BaseLease):
    """A granted lease for async code: ``async with lease:`` releases it on exit.

    ``await lease.release()``, ``await lease.extend(ttl)`` and ``async with
    lease.keep_alive():`` are ``Lease``'s on the lock's ``redis.asyncio`` client; ``state``,
    ``check()``, ``lost`` and ``on_lost`` are the same as the sync lease's.
    """

    __slots__ = ()
    _lock: AsyncGrantingLock

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.release()

    async def release(self) -> bool:
        """Delete the lock if it is still ours. False if it expired or was taken over, or
        if Redis could not be reached (the lease then expires on its own)."""
        self._life.end()
        with tracing.operation_span("locking.release", self.resource, token=self.token) as span:
            try:
                script = self._lock.scripts.release
                released = bool(await script(keys=[lock_key(self.resource)], args=[self._value]))
            except (RedisError, RedisClusterException) as exc:
                logger.warning(
                    "could not release lease; it will expire",
                    extra={"resource": self.resource, "token": self.token, "error": str(exc)},
                )
                released = False
            span.set_attribute(tracing.RELEASED, released)
        return released

    async def extend(self, ttl: timedelta) -> bool:
        """Reset the lease's expiry to ``ttl`` from now if it is still ours (``Lease.extend``)."""
        ttl_ms = positive_ms(ttl)
        life = self._life
        if life.state.is_over:
            return False
        started = time.monotonic()
        try:
            script = self._lock.scripts.extend
            extended = bool(
                await script(keys=[lock_key(self.resource)], args=[self._value, ttl_ms])
            )
        except (RedisError, RedisClusterException) as exc:
            return life.renewed(False, ttl, started, error=exc)
        return life.renewed(extended, ttl, started)

    def keep_alive(self, ttl: timedelta | None = None, *, cancel: bool = False) -> "AsyncKeepAlive":
        """``Lease.keep_alive`` for async code: an asyncio task extends the lease every ttl/3.

        ``async with lease.keep_alive(cancel=True):`` also cancels the task running the
        block the moment the lease is ``LOST`` (not while it is only ``UNCERTAIN``), and the
        block then ends with ``LeaseLost`` (as ``asyncio.timeout()`` ends one with
        ``TimeoutError``). Cancellation stops the awaiting, not work already handed to a
        thread: a fenced commit running in ``sync_to_async`` finishes or is refused by the
        fence, as without cancellation.
        """
        return AsyncKeepAlive(self, self._life.renewal_ttl(ttl), cancel=cancel)


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

    def __init__(self, lease: AsyncLease, ttl: timedelta, *, cancel: bool):
        self.lease = lease
        self.ttl = ttl
        self.cancel = cancel
        self._task: asyncio.Task | None = None  # the task running the block
        self._cancelling = 0
        self._renewal: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self._cancelled_by_us = False

    async def __aenter__(self) -> AsyncLease:
        self._task = asyncio.current_task()
        self._cancelling = self._task.cancelling() if self._task else 0
        self._renewal = asyncio.create_task(self._run(), name=f"keep-alive {self.lease.resource}")
        return self.lease

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
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
                await asyncio.wait_for(self._stop.wait(), lease._life.renewal_pause(self.ttl))
                return  # the block ended
            except TimeoutError:
                pass
            if not lease.state.is_over and await lease.extend(self.ttl):
                continue
            if lease.state is LeaseState.RELEASED:
                return  # released inside the block: nothing left to keep, nothing to cancel
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
