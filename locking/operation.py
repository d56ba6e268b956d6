"""One fenced attempt, end to end: lease, work, audit, release, counter-loss recovery.

Services call ``run_fenced`` with a ``work(lease)`` callable that does the external call
(outside any transaction) and then one ``transaction.atomic()`` block starting with
``advance_fence``. Everything around it — granting, recording the outcome, releasing,
reseeding a lost counter — is the same for every fenced operation, so it lives here once.
A refusal is recorded after the work, outside its rolled-back transaction; a committed
attempt's row is written by the lease's fence, in its own statement (``advance_fence``,
``insert_fenced``: locking/fence.py), and commits with the writes (one write and one commit
fewer; ``lease.record_committed()`` says an outcome other than committed). ``arun_fenced``
(``locking.asyncio``) is the same flow for a coroutine. ``LeasedAttempt`` is ``run_fenced`` in two
halves, for attempts on different resources whose writes commit in one transaction.
"""

from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from typing import TypeVar

from django.db import connections
from django.db.transaction import TransactionManagementError

from locking.audit import Attempt, AttemptAudit
from locking.epochs import (
    FenceBeyondRecord,
    current_epoch,
    start_epoch,
)
from locking.exceptions import StaleAtReceiver, StaleFencingToken
from locking.keys import epoch_of
from locking.lease import Lease
from locking.lock import FenceLock, default_lock
from locking.outcomes import EpochCause, HasOutcome

T = TypeVar("T")


def run_fenced(
    resource: str,
    work: Callable[[Lease], T],
    *,
    ttl: timedelta,
    attempt: Attempt,
    lock: FenceLock | None = None,
    using: str | None = None,
) -> T:
    """Run ``work(lease)`` under a fresh lease on ``resource`` and record the outcome.

    The outcome recorded on success is ``result.outcome`` if the result has one (e.g.
    ``Outcome.ALREADY_DONE``), else ``Outcome.COMMITTED``. An exception that declares its
    ``outcome`` (``LockHeld``: busy, ``LockUnavailable``: unavailable,
    ``StaleFencingToken``: stale, and the caller's own, e.g. a failed external call) is
    recorded with it and re-raised; any other exception is re-raised unrecorded. A token
    the fence refused because Redis's counter is behind the database is recovered from
    once (``_regrant_above``).

    Must not run inside ``transaction.atomic()``: the external call must not hold a
    transaction open, and the audit record must survive the work's rollback. ``using`` is
    the database of the audit, the epochs and that check: the lock's (``LOCK_DATABASE``,
    unless the ``lock`` given says otherwise), which must be the fenced rows' own.
    """
    lock = lock or default_lock()
    using = using or lock.using
    if connections[using].in_atomic_block:
        raise TransactionManagementError(
            "run_fenced() opens its own transaction; do not call it inside transaction.atomic()."
        )
    audit = AttemptAudit(resource, attempt, using=using)
    lease: Lease | None = None
    with audit.span():
        try:
            lease = lock.acquire(resource, ttl=ttl, holder=attempt.actor, audit=audit)
            audit.granted(lease)
            try:
                result = work(lease)
            except StaleFencingToken as stale:
                if not _counter_behind(lock, resource, stale):
                    raise
                audit.counter_behind(stale)
                lease.release()
                lease = None  # released: nothing to release should the new grant fail
                lease = _regrant_above(stale, lock, audit, ttl=ttl)
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


class LeasedAttempt:
    """``run_fenced`` in two halves, for attempts whose writes commit together.

    The month start bills many associations, each under its own lease; committing several
    in one transaction saves a ``BEGIN`` and a durable ``COMMIT`` per association.
    ``run_fenced`` cannot: it records and releases as soon as its work returns. Here::

        attempt = LeasedAttempt(resource, ttl=ttl, attempt=Attempt(...))  # grants, or raises
        ...the work outside any transaction, under attempt.lease...
        with transaction.atomic():                  # shared with other attempts
            ...insert_fenced / advance_fence, the writes...
            attempt.lease.record_committed()        # this attempt's audit row
        attempt.finished(result)                    # after the commit: record, release

    or ``attempt.refused(exc)`` for an exception instead of a result (recorded when it
    declares its outcome, as ``run_fenced`` records it). Either releases the lease; call
    one of them exactly once, in a ``finally`` if need be. A refusal to grant (busy, Redis
    down) is recorded and raised by the constructor. There is no counter recovery here: a
    ``StaleFencingToken`` for which ``counter_is_behind`` is true should be recorded with
    ``refused`` and the attempt run again with ``run_fenced``, which recovers.
    """

    __slots__ = ("_stack", "audit", "lease", "lock")

    def __init__(
        self,
        resource: str,
        *,
        ttl: timedelta,
        attempt: Attempt,
        lock: FenceLock | None = None,
        using: str | None = None,
    ):
        self.lock = lock or default_lock()
        using = using or self.lock.using
        if connections[using].in_atomic_block:  # as run_fenced: a new epoch commits alone
            raise TransactionManagementError(
                "LeasedAttempt() grants outside any transaction; create it before "
                "transaction.atomic()."
            )
        self.audit = AttemptAudit(resource, attempt, using=using)
        self.lease: Lease | None = None
        self._stack = ExitStack()
        self._stack.enter_context(self.audit.span())
        try:
            self.lease = self.lock.acquire(
                resource, ttl=ttl, holder=attempt.actor, audit=self.audit
            )
        except Exception as exc:
            self.refused(exc)
            raise
        self.audit.granted(self.lease)

    def finished(self, result: object) -> None:
        """Record the outcome of ``result`` (committed unless it says otherwise); release."""
        try:
            self.audit.finished(result, self.lease)
        finally:
            self._end()

    def refused(self, exc: BaseException) -> None:
        """Record ``exc`` if it declares its outcome, as ``run_fenced`` would; release."""
        try:
            if isinstance(exc, HasOutcome):
                self.audit.refused(exc, self.lease)
        finally:
            self._end()

    def counter_is_behind(self, stale: StaleFencingToken) -> bool:
        """Whether ``stale`` means the Redis counter is behind (``counter_is_behind``); not
        for a recorded token beyond the resource's record (a corrupt row): that refusal
        stands, and ``run_fenced`` would name it ``FenceBeyondRecord``."""
        try:
            return _counter_behind(self.lock, self.audit.resource, stale)
        except FenceBeyondRecord:
            return False

    def _end(self) -> None:
        try:
            if self.lease is not None:
                self.lease.release()
        finally:
            self._stack.close()


def _regrant_above(
    stale: StaleFencingToken, lock: FenceLock, audit: AttemptAudit, *, ttl: timedelta
) -> Lease:
    """A new lease whose token is above the one the fence refused, after a counter behind.

    A counter Redis lost entirely is caught before the work, by the grant itself (it starts
    a new epoch). A counter that is present but behind the database (a failover to a
    replica without ``LOCK_REDIS_MIN_REPLICAS``, an AOF that lost its last second, an
    upgrade from tokens without epochs) shows up as a rejected token, not a newer holder:
    Redis handed out a number the database had seen. The caller has recorded it and
    released its lease; this starts an epoch above the recorded token, reseeds the counter
    and grants again, for the attempt to run once more.
    """
    resource = audit.resource
    floor = start_epoch(
        resource, above=stale.recorded, using=lock.using, cause=EpochCause.COUNTER_BEHIND
    )
    lock.reseed(resource, floor)
    lease = lock.acquire(resource, ttl=ttl, holder=audit.attempt.actor, audit=audit)
    audit.granted(lease)
    return lease


def _counter_behind(lock: FenceLock, resource: str, stale: StaleFencingToken) -> bool:
    """``counter_is_behind``, with the Redis counter read now, for a number to believe."""
    return counter_is_behind(lock.current_token(resource), stale) and _believable(
        lock.using, resource, stale
    )


def _believable(using: str, resource: str, stale: StaleFencingToken) -> bool:
    """Whether the token ``stale`` says was recorded can have been granted, for a new epoch
    to start above it. No token of an epoch beyond the resource's durable one was ever
    granted (the epoch is recorded before Redis hands out its tokens), so such a number is
    not believed, wherever it comes from: a receiver's ``accepted`` (from the network:
    signed, but a receiver's bug or a leaked secret could state anything) leaves the
    refusal standing as stale; a row's ``last_fence_token`` (an ``update()`` by hand, an
    old fixture) is a corrupt row, ``FenceBeyondRecord``, never an epoch above ``2**62``
    that would use up the resource's epochs for good.
    """
    if stale.recorded is None:
        return True
    epoch = current_epoch(resource, using=using)
    if epoch_of(stale.recorded) <= epoch:
        return True
    if isinstance(stale, StaleAtReceiver):
        return False
    raise FenceBeyondRecord(resource, recorded=stale.recorded, epoch=epoch) from stale


def _in_atomic_block(using: str) -> bool:
    return connections[using].in_atomic_block


def _call(function, *args):
    return function(*args)


def counter_is_behind(current: int, exc: StaleFencingToken) -> bool:
    """Whether a rejection means the Redis counter is behind, not that a newer holder won.

    ``current`` is the Redis counter now. The counter is behind when it is below the
    recorded token, or in an epoch older than the one that refused the token. A rejected
    token *equal* to the recorded one was issued twice, which also means the counter went
    back. A receiver's refusal (``StaleAtReceiver``) counts the same way: the token it had
    accepted was granted, so a counter below it is behind.
    """
    if exc.epoch is not None:
        return epoch_of(current) < exc.epoch
    if exc.recorded is None:  # a receiver refused it without saying what it had accepted
        return False
    return current < exc.recorded or exc.token == exc.recorded
