"""One fenced attempt, end to end: lease, work, audit, release, counter-loss recovery.

Services call ``run_fenced`` with a ``work(lease)`` callable that does the external call
(outside any transaction) and then one ``transaction.atomic()`` block starting with
``advance_fence``. Everything around it — granting, recording the outcome, releasing,
reseeding a lost counter — is the same for every fenced operation, so it lives here once.
A refusal is recorded after the work, outside its rolled-back transaction; a committed
attempt is too, unless the work called ``lease.record_committed()`` inside its block (the
row then commits with the writes, one write and one commit fewer). ``arun_fenced`` is the
same flow for a coroutine ``work(lease)``; its database steps (the audit, a new epoch) run
in ``sync_to_async(thread_sensitive=True)``.
"""

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, TypeVar, runtime_checkable

from asgiref.sync import sync_to_async
from django.db import connections
from django.db.transaction import TransactionManagementError
from opentelemetry.trace import Span

from locking import metrics, tracing
from locking.audit import record_fence_event
from locking.epochs import astart_epoch, epoch_of, start_epoch
from locking.exceptions import LockHeld, LockUnavailable, StaleFencingToken
from locking.lease import Lease
from locking.lock import FenceLock
from locking.outcomes import Outcome

logger = logging.getLogger(__name__)

T = TypeVar("T")


@runtime_checkable
class HasOutcome(Protocol):
    """A result or an exception that says which outcome it is, e.g. ``Outcome.ALREADY_DONE``
    for a result, ``outcome = Outcome.FAILED`` as the class attribute of an exception."""

    outcome: Outcome


@dataclass(frozen=True)
class Attempt:
    """Who is asking, as the audit trail records it."""

    actor: str
    operation: str = ""
    scope: str = ""
    ip: str | None = None


def run_fenced(
    resource: str,
    work: Callable[[Lease], T],
    *,
    ttl: timedelta,
    attempt: Attempt,
    lock: FenceLock | None = None,
    using: str = "default",
) -> T:
    """Run ``work(lease)`` under a fresh lease on ``resource`` and record the outcome.

    The outcome recorded on success is ``result.outcome`` if the result has one (e.g.
    ``Outcome.ALREADY_DONE``), else ``Outcome.COMMITTED``. An exception that declares its
    ``outcome`` (``LockHeld``: busy, ``LockUnavailable``: unavailable,
    ``StaleFencingToken``: stale, and the caller's own, e.g. a failed external call) is
    recorded with it and re-raised; any other exception is re-raised unrecorded.

    A counter Redis lost entirely is caught before the work, by the grant itself (it starts
    a new epoch). A counter that is present but behind the database (a failover to a
    replica without ``LOCK_REDIS_MIN_REPLICAS``, an AOF that lost its last second, an
    upgrade from tokens without epochs) shows up as a rejected token: then the rejection is
    recorded, a new epoch above the recorded token is started, and the attempt runs once
    more.

    Must not run inside ``transaction.atomic()``: the external call must not hold a
    transaction open, and the audit record must survive the work's rollback.
    """
    if connections[using].in_atomic_block:
        raise TransactionManagementError(
            "run_fenced() opens its own transaction; do not call it inside transaction.atomic()."
        )
    lock = lock or FenceLock()
    audit = AttemptAudit(resource, attempt, using=using)
    lease: Lease | None = None
    with audit.span():
        try:
            lease = lock.acquire(
                resource, ttl=ttl, holder=attempt.actor, audit=audit.in_transaction
            )
            audit.granted(lease)
            try:
                result = work(lease)
            except StaleFencingToken as stale:
                if not counter_is_behind(lock.current_token(resource), stale):
                    raise
                # Not a newer holder: Redis handed out a number the database had seen.
                # Record it, start an epoch above the recorded token, run the attempt again.
                audit.counter_behind(stale)
                lease.release()
                lease = None
                lock.reseed(resource, start_epoch(resource, above=stale.recorded, using=lock.using))
                lease = lock.acquire(
                    resource, ttl=ttl, holder=attempt.actor, audit=audit.in_transaction
                )
                audit.granted(lease)
                result = work(lease)
        except Exception as exc:  # always re-raised; recorded when it declares its outcome
            if isinstance(exc, HasOutcome):
                audit.refused(exc, lease)
            raise
        else:
            audit.finished(result, lease)
            return result
        finally:
            if lease is not None:
                lease.release()


async def arun_fenced(
    resource: str,
    work: Callable[[Lease], Awaitable[T]],
    *,
    ttl: timedelta,
    attempt: Attempt,
    lock: FenceLock | None = None,
    using: str = "default",
) -> T:
    """``run_fenced`` for async code: ``await work(lease)`` under a fresh lease.

    The same flow and answers: grant (``aacquire``), work, the audit record, the one retry
    when the Redis counter is behind, release (``arelease``). ``work`` is a coroutine
    function; it makes its external call with an async client, then commits with
    ``aadvance_fence(queryset, lease, write)`` (one transaction in
    ``sync_to_async(thread_sensitive=True)``; Django's transactions are synchronous). The
    audit records are written the same way, after the work's transaction ended.
    """
    if await sync_to_async(_in_atomic_block, thread_sensitive=True)(using):
        raise TransactionManagementError(
            "arun_fenced() opens its own transaction; do not call it inside transaction.atomic()."
        )
    lock = lock or FenceLock()
    audit = AttemptAudit(resource, attempt, using=using)
    record = sync_to_async(_call, thread_sensitive=True)
    lease: Lease | None = None
    with audit.span():
        try:
            lease = await lock.aacquire(
                resource, ttl=ttl, holder=attempt.actor, audit=audit.in_transaction
            )
            audit.granted(lease)
            try:
                result = await work(lease)
            except StaleFencingToken as stale:
                if not counter_is_behind(await lock.acurrent_token(resource), stale):
                    raise
                await record(audit.counter_behind, stale)
                await lease.arelease()
                lease = None
                floor = await astart_epoch(resource, above=stale.recorded, using=lock.using)
                await lock.areseed(resource, floor)
                lease = await lock.aacquire(
                    resource, ttl=ttl, holder=attempt.actor, audit=audit.in_transaction
                )
                audit.granted(lease)
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
                await lease.arelease()


def _in_atomic_block(using: str) -> bool:
    return connections[using].in_atomic_block


def _call(function, *args):
    return function(*args)


class AttemptAudit:
    """The record of one ``run_fenced`` call: its events in ``FenceEvent``, its metrics."""

    def __init__(self, resource: str, attempt: Attempt, *, using: str):
        self.resource = resource
        self.attempt = attempt
        self.using = using
        self.started = time.monotonic()
        self._span: Span | None = None
        self._written: int | None = None  # the token whose row committed in the work

    @contextmanager
    def span(self) -> Iterator[Span]:
        """The attempt's root span: its grant, work, commit and release are children."""
        with tracing.operation_span(
            "locking.run_fenced", self.resource, operation=self.attempt.operation
        ) as span:
            self._span = span
            yield span

    def granted(self, lease: Lease) -> None:
        metrics.lease_granted(self.attempt.operation)
        if self._span is not None:
            self._span.set_attribute(tracing.FENCE_TOKEN, lease.token)

    def in_transaction(self, outcome: Outcome, lease: Lease) -> None:
        """Write the committed attempt's row inside the work's transaction (``Lease.
        record_committed``): one write and one commit fewer than recording it after.

        Only once the transaction commits does ``finished`` count it as written; a
        rollback erases the row, and ``finished`` or ``refused`` then records outside.
        """
        connection = connections[self.using]
        if not connection.in_atomic_block:
            raise TransactionManagementError(
                "Lease.record_committed() belongs inside the work's transaction.atomic()."
            )
        _write_event(
            resource=self.resource,
            outcome=outcome,
            token=lease.token,
            attempt=self.attempt,
            using=self.using,
        )
        connection.on_commit(lambda: setattr(self, "_written", lease.token))

    def finished(self, result: object, lease: Lease) -> None:
        outcome = result.outcome if isinstance(result, HasOutcome) else Outcome.COMMITTED
        self._record(outcome, lease.token, written=self._written == lease.token)

    def refused(self, exc: HasOutcome, lease: Lease | None) -> None:
        """Record an exception with the outcome it declares, and the facts it carries."""
        match exc:
            case LockHeld():
                self._record(exc.outcome, exc.token, f"held by {exc.holder}")
            case LockUnavailable():
                self._record(exc.outcome, None, exc.reason)
            case StaleFencingToken():
                detail = f"a newer holder recorded token {exc.recorded}"
                self._record(exc.outcome, exc.token, detail)
            case _:
                self._record(exc.outcome, lease.token if lease else None, str(exc))

    def counter_behind(self, stale: StaleFencingToken) -> None:
        """Record a rejection that the attempt's retry answers: not its final outcome."""
        logger.warning(
            "fence counter behind the database; starting a new epoch and retrying once",
            extra={"resource": self.resource, "token": stale.token, "recorded": stale.recorded},
        )
        metrics.counter_reseeded(self.attempt.operation)
        self._record(
            Outcome.STALE,
            stale.token,
            f"Redis fence counter was behind the recorded token {stale.recorded}: "
            "new epoch started, retrying",
            final=False,
        )

    def _record(
        self,
        outcome: Outcome,
        token: int | None,
        detail: str = "",
        *,
        final: bool = True,
        written: bool = False,
    ) -> None:
        if final:
            elapsed = time.monotonic() - self.started
            metrics.attempt_finished(self.attempt.operation, outcome, elapsed)
            if self._span is not None:
                tracing.set_outcome(self._span, outcome)
        if written:
            return
        record_fence_event(
            resource=self.resource,
            outcome=outcome,
            token=token,
            actor=self.attempt.actor,
            detail=detail,
            scope=self.attempt.scope,
            operation=self.attempt.operation,
            ip=self.attempt.ip,
            using=self.using,
        )


def _write_event(*, resource: str, outcome: Outcome, token: int, attempt: Attempt, using: str):
    # Inside the work's transaction: a database error must abort it, not be swallowed
    # (record_fence_event's choice outside a transaction).
    from locking.models import FenceEvent  # models load after the app registry

    logger.info(
        "fenced attempt %s",
        outcome,
        extra={"resource": resource, "token": token, "outcome": outcome, "actor": attempt.actor},
    )
    FenceEvent.objects.using(using).create(
        resource=resource,
        outcome=outcome,
        token=token,
        actor=attempt.actor[:200],
        scope=attempt.scope[:100],
        operation=attempt.operation[:50],
        ip=attempt.ip,
    )


def counter_is_behind(current: int, exc: StaleFencingToken) -> bool:
    """Whether a rejection means the Redis counter is behind, not that a newer holder won.

    ``current`` is the Redis counter now. The counter is behind when it is below the
    recorded token, or in an epoch older than the one that refused the token. A rejected
    token *equal* to the recorded one was issued twice, which also means the counter went
    back.
    """
    if exc.epoch is not None:
        return epoch_of(current) < exc.epoch
    return current < exc.recorded or exc.token == exc.recorded
