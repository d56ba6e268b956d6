"""``arun_fenced``: ``run_fenced``'s flow for a coroutine ``work(lease)``, on an
``AsyncFenceLock``; its database steps (the audit, a new epoch) run in
``sync_to_async(thread_sensitive=True)``."""

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.db.transaction import TransactionManagementError

from locking.asyncio.lease import AsyncLease
from locking.asyncio.lock import AsyncFenceLock
from locking.audit import Attempt, AttemptAudit
from locking.conf import setting
from locking.epochs import astart_epoch
from locking.exceptions import StaleFencingToken
from locking.operation import _believable, _call, _in_atomic_block, counter_is_behind
from locking.outcomes import EpochCause, HasOutcome

T = TypeVar("T")


async def arun_fenced(
    resource: str,
    work: Callable[[AsyncLease], Awaitable[T]],
    *,
    ttl: timedelta,
    attempt: Attempt,
    lock: AsyncFenceLock | None = None,
    using: str | None = None,
) -> T:
    """``run_fenced`` for async code: ``await work(lease)`` under a fresh lease.

    The same flow and answers on an ``AsyncFenceLock``: grant, work, the audit record, the
    one retry when the Redis counter is behind, release. ``work`` is a coroutine
    function; it makes its external call with an async client, then commits with
    ``aadvance_fence(queryset, lease, write)`` (one transaction in
    ``sync_to_async(thread_sensitive=True)``; Django's transactions are synchronous). The
    audit records are written the same way, after the work's transaction ended.
    """
    using = using or (lock.using if lock is not None else setting("LOCK_DATABASE"))
    if await sync_to_async(_in_atomic_block, thread_sensitive=True)(using):
        raise TransactionManagementError(
            "arun_fenced() opens its own transaction; do not call it inside transaction.atomic()."
        )
    lock = lock or AsyncFenceLock()
    audit = AttemptAudit(resource, attempt, using=using)
    record = sync_to_async(_call, thread_sensitive=True)
    lease: AsyncLease | None = None
    with audit.span():
        try:
            lease = await lock.acquire(resource, ttl=ttl, holder=attempt.actor, audit=audit)
            audit.granted(lease)
            try:
                result = await work(lease)
            except StaleFencingToken as stale:
                if not counter_is_behind(await lock.current_token(resource), stale) or not (
                    await sync_to_async(_believable, thread_sensitive=True)(
                        lock.using, resource, stale
                    )
                ):
                    raise
                await record(audit.counter_behind, stale)
                await lease.release()
                lease = None  # released: nothing to release should the new grant fail
                lease = await _aregrant_above(stale, lock, audit, ttl=ttl)
                result = await work(lease)
        except Exception as exc:  # always re-raised; recorded when it declares its outcome
            if isinstance(exc, HasOutcome):
                await record(audit.refused, exc, lease)
            raise
        else:
            await record(audit.finished, result, lease)
            return result
        finally:
            if lease is not None:
                await lease.release()


async def _aregrant_above(
    stale: StaleFencingToken, lock: AsyncFenceLock, audit: AttemptAudit, *, ttl: timedelta
) -> AsyncLease:
    """``_regrant_above`` for ``arun_fenced``."""
    resource = audit.resource
    floor = await astart_epoch(
        resource, above=stale.recorded, using=lock.using, cause=EpochCause.COUNTER_BEHIND
    )
    await lock.reseed(resource, floor)
    lease = await lock.acquire(resource, ttl=ttl, holder=audit.attempt.actor, audit=audit)
    audit.granted(lease)
    return lease
