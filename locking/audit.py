"""The audit trail of fenced attempts (``FenceEvent``): who asked (``Attempt``), one row
per outcome (``record_fence_event``), and the record of one ``run_fenced`` call with its
metrics and span (``AttemptAudit``)."""

import functools
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections
from django.db.transaction import TransactionManagementError
from django.utils import timezone
from opentelemetry.trace import Span

from locking import metrics, tracing
from locking.conf import setting
from locking.exceptions import LockHeld, LockUnavailable, StaleAtReceiver, StaleFencingToken
from locking.outcomes import HasOutcome, Outcome, RefusedBy

__all__ = ["Attempt", "record_fence_event"]

if TYPE_CHECKING:
    from locking.models import FenceEvent
    from locking.tenure import BaseLease

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Attempt:
    """Who is asking, as the audit trail records it."""

    actor: str
    operation: str = ""
    scope: str = ""
    ip: str | None = None


def record_fence_event(
    *,
    resource: str,
    outcome: Outcome,
    token: int | None = None,
    actor: str = "",
    detail: str = "",
    scope: str = "",
    operation: str = "",
    ip: str | None = None,
    using: str | None = None,
) -> "FenceEvent | None":
    """Write one ``FenceEvent`` and log it (``None``: the database refused the write). Call
    it after the operation's transaction ended.

    A rejected write rolls back its own transaction; recording the rejection outside that
    transaction is what keeps the rejection on record. Never raises on a database error:
    the audit must not turn an answered request into a 500.
    """
    from locking.models import FenceEvent

    using = using or setting("LOCK_DATABASE")
    log_extra = {"resource": resource, "token": token, "outcome": outcome, "actor": actor}
    logger.info("fenced attempt %s", outcome, extra=log_extra)
    if connections[using].in_atomic_block:
        logger.warning(
            "recording a fence event inside a transaction: a rollback would erase it",
            extra=log_extra,
        )
    try:
        return FenceEvent.objects.using(using).create(
            resource=resource,
            outcome=outcome,
            token=token,
            actor=actor[:200],
            detail=detail,
            scope=scope[:100],
            operation=operation[:50],
            ip=ip,
        )
    except DatabaseError:
        logger.exception("could not record fence event", extra=log_extra)
        return None


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

    def granted(self, lease: "BaseLease") -> None:
        metrics.lease_granted(self.attempt.operation)
        if self._span is not None:
            self._span.set_attribute(tracing.FENCE_TOKEN, lease.token)

    def in_transaction(self, outcome: Outcome, lease: "BaseLease") -> None:
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

    def finished(self, result: object, lease: "BaseLease") -> None:
        # ``isinstance(result, HasOutcome)`` by hand: a runtime Protocol check costs ~7 µs
        # per call here, a measurable part of a fenced write.
        outcome = getattr(result, "outcome", Outcome.COMMITTED)
        self._record(outcome, lease.token, written=self._written == lease.token)

    def refused(self, exc: HasOutcome, lease: "BaseLease | None") -> None:
        """Record an exception with the outcome it declares, and the facts it carries."""
        match exc:
            case LockHeld():
                self._record(exc.outcome, exc.token, f"held by {exc.holder}")
            case LockUnavailable():
                self._record(exc.outcome, None, exc.reason)
            case StaleAtReceiver():
                metrics.stale_write_refused(self.attempt.operation, RefusedBy.RECEIVER)
                self._record(exc.outcome, exc.token, f"{exc.url or 'the receiver'}: {exc}")
            case StaleFencingToken():
                metrics.stale_write_refused(self.attempt.operation, RefusedBy.FENCE)
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
        refused_by = RefusedBy.RECEIVER if isinstance(stale, StaleAtReceiver) else RefusedBy.FENCE
        metrics.stale_write_refused(self.attempt.operation, refused_by)
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
    # (record_fence_event's choice outside a transaction). One plain INSERT, the row as
    # ``FenceEvent.objects.create`` would write it, without the model's round of Python.
    logger.info(
        "fenced attempt %s",
        outcome,
        extra={"resource": resource, "token": token, "outcome": outcome, "actor": attempt.actor},
    )
    connection = connections[using]
    sql, fields = _insert_event(connection.alias)
    values = (
        resource,
        attempt.scope[:100],
        attempt.operation[:50],
        token,
        outcome,
        attempt.actor[:200],
        attempt.ip,
        "",
        timezone.now(),
    )
    params = [
        field.get_db_prep_save(value, connection)
        for field, value in zip(fields, values, strict=True)
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


_EVENT_COLUMNS = (
    "resource",
    "scope",
    "operation",
    "token",
    "outcome",
    "actor",
    "ip",
    "detail",
    "at",
)


@functools.cache
def _insert_event(alias: str) -> tuple[str, tuple]:
    """The INSERT of one ``FenceEvent`` row (``_EVENT_COLUMNS``), and its fields."""
    from locking.models import FenceEvent  # models load after the app registry

    quote = connections[alias].ops.quote_name
    fields = tuple(FenceEvent._meta.get_field(name) for name in _EVENT_COLUMNS)
    columns = ", ".join(quote(field.column) for field in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    table = quote(FenceEvent._meta.db_table)
    return f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", fields  # noqa: S608
