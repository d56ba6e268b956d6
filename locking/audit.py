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

from locking import tracing
from locking.conf import setting
from locking.exceptions import LockHeld, LockUnavailable, StaleAtReceiver, StaleFencingToken
from locking.outcomes import HasOutcome, Outcome, RefusedBy

__all__ = ["Attempt", "record_fence_event"]

if TYPE_CHECKING:
    from locking.lease import BaseLease
    from locking.models import FenceEvent

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
        # The attempt's row written inside the work (by the fence's statement, or by
        # ``record_committed``), and the same once its transaction committed: what
        # ``finished`` and ``refused`` then update instead of writing a second row.
        self._row: _Row | None = None
        self._written: _Row | None = None

    @contextmanager
    def span(self) -> Iterator[Span]:
        """The attempt's root span: its grant, work, commit and release are children."""
        with tracing.operation_span(
            "locking.run_fenced", self.resource, operation=self.attempt.operation
        ) as span:
            self._span = span
            yield span

    def granted(self, lease: "BaseLease") -> None:
        tracing.lease_granted(self.attempt.operation)
        if self._span is not None:
            self._span.set_attribute(tracing.FENCE_TOKEN, lease.token)

    def __call__(self, outcome: Outcome, lease: "BaseLease") -> None:
        """The lease's audit hook (``FenceLock.acquire(audit=...)``): ``in_transaction``."""
        self.in_transaction(outcome, lease)

    def in_transaction(self, outcome: Outcome, lease: "BaseLease") -> None:
        """Record the committed attempt inside the work's transaction (``Lease.
        record_committed``): one write and one commit fewer than recording it after.

        The fence's statement has usually written the row already (``fence_event``), as
        committed: then ``COMMITTED`` writes nothing, and another outcome
        (``ALREADY_DONE``) updates that row. Only once the transaction commits does
        ``finished`` count it as written; a rollback erases the row, and ``finished`` or
        ``refused`` then records outside.
        """
        connection = connections[self.using]
        if not connection.in_atomic_block:
            raise TransactionManagementError(
                "Lease.record_committed() belongs inside the work's transaction.atomic()."
            )
        _log(self.resource, outcome, lease.token, self.attempt)
        row = self._row
        if row is not None and row.token == lease.token:
            if row.outcome != outcome:
                _set_outcome(connection, row, outcome)
            row.logged = True
            return
        event = _write_event(
            resource=self.resource,
            outcome=outcome,
            token=lease.token,
            attempt=self.attempt,
            using=self.using,
        )
        self._wrote(_Row(lease.token, event, outcome, logged=True), connection)

    def fence_event(self, lease: "BaseLease", connection) -> list | None:
        """The parameters of this attempt's row (``event_insert``), committed, for the
        fence's statement to insert with the fence: ``None`` when the row is written
        already (a second fence of the lease) or belongs in another database.

        Whatever the fence refuses inserts nothing (the row is inserted from the fenced
        row); ``fenced`` is told the row's id once the statement passed.
        """
        row = self._row
        if connection.alias != self.using or (row is not None and row.token == lease.token):
            return None
        return _event_params(
            connection, self.resource, Outcome.COMMITTED, lease.token, self.attempt
        )

    def fenced(self, lease: "BaseLease", event: int, connection) -> None:
        """The fence's statement inserted this attempt's row ``event``, committed, in the
        work's transaction (``fence_event``)."""
        self._wrote(_Row(lease.token, event, Outcome.COMMITTED), connection)

    def _wrote(self, row: "_Row", connection) -> None:
        self._row = row
        connection.on_commit(lambda: setattr(self, "_written", row))

    def finished(self, result: object, lease: "BaseLease") -> None:
        # ``isinstance(result, HasOutcome)`` by hand: a runtime Protocol check costs ~7 µs
        # per call here, a measurable part of a fenced write.
        outcome = getattr(result, "outcome", Outcome.COMMITTED)
        self._record(outcome, lease.token)

    def refused(self, exc: HasOutcome, lease: "BaseLease | None") -> None:
        """Record an exception with the outcome it declares, and the facts it carries."""
        match exc:
            case LockHeld():
                self._record(exc.outcome, exc.token, f"held by {exc.holder}")
            case LockUnavailable():
                self._record(exc.outcome, None, exc.reason)
            case StaleAtReceiver():
                tracing.stale_write_refused(self.attempt.operation, RefusedBy.RECEIVER)
                self._record(exc.outcome, exc.token, f"{exc.url or 'the receiver'}: {exc}")
            case StaleFencingToken():
                tracing.stale_write_refused(self.attempt.operation, RefusedBy.FENCE)
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
        tracing.counter_reseeded(self.attempt.operation)
        refused_by = RefusedBy.RECEIVER if isinstance(stale, StaleAtReceiver) else RefusedBy.FENCE
        tracing.stale_write_refused(self.attempt.operation, refused_by)
        self._record(
            Outcome.STALE,
            stale.token,
            f"Redis fence counter was behind the recorded token {stale.recorded}: "
            "new epoch started, retrying",
            final=False,
        )

    def _record(
        self, outcome: Outcome, token: int | None, detail: str = "", *, final: bool = True
    ) -> None:
        if final:
            elapsed = time.monotonic() - self.started
            tracing.attempt_finished(self.attempt.operation, outcome, elapsed)
            if self._span is not None:
                tracing.set_outcome(self._span, outcome)
        written = self._written
        if written is not None and written.token == token:
            # The work committed the attempt's row: it says the outcome (the usual case,
            # nothing to write), or it is updated to say it (the work ended otherwise
            # after a transaction of its own had committed).
            if written.outcome != outcome or detail:
                _rewrite_event(written, outcome, detail, self, using=self.using)
            elif not written.logged:
                _log(self.resource, outcome, token, self.attempt)
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


@dataclass(eq=False)
class _Row:
    """An attempt's ``FenceEvent`` row written inside its work: the token of the lease it
    records, its id, the outcome it says, and whether that was logged."""

    token: int
    id: int
    outcome: Outcome
    logged: bool = False


@dataclass(frozen=True, slots=True)
class WithFence:
    """The attempt whose row a fence statement inserts too (``advance_fence``,
    ``insert_fenced``): ``run_fenced``'s or ``LeasedAttempt``'s, for a lease it granted."""

    audit: AttemptAudit
    lease: "BaseLease"
    params: list  # the row's values, after the fence's own parameters

    @classmethod
    def of(cls, lease: object, connection) -> "WithFence | None":
        """The lease's attempt, unless it has none (a lease granted by ``FenceLock.acquire``
        alone, a ``FencingToken``) or its row is written already (``fence_event``)."""
        audit = getattr(lease, "audit", None)
        if not isinstance(audit, AttemptAudit):
            return None
        params = audit.fence_event(lease, connection)  # type: ignore[arg-type]
        return None if params is None else cls(audit, lease, params)  # type: ignore[arg-type]

    def inserted(self, event: int, connection) -> None:
        """The fence passed: its statement inserted the row ``event``."""
        self.audit.fenced(self.lease, event, connection)


def _log(resource: str, outcome: Outcome, token: int | None, attempt: Attempt) -> None:
    logger.info(
        "fenced attempt %s",
        outcome,
        extra={"resource": resource, "token": token, "outcome": outcome, "actor": attempt.actor},
    )


def _write_event(
    *, resource: str, outcome: Outcome, token: int, attempt: Attempt, using: str
) -> int:
    """Insert one ``FenceEvent`` row inside the work's transaction; return its id.

    A database error must abort that transaction, not be swallowed (``record_fence_event``'s
    choice outside a transaction). One plain INSERT, the row as ``FenceEvent.objects.create``
    would write it, without the model's round of Python."""
    connection = connections[using]
    params = _event_params(connection, resource, outcome, token, attempt)
    with connection.cursor() as cursor:
        cursor.execute(_insert_event(connection.alias), params)
        (event,) = cursor.fetchone()
    return event


def _set_outcome(connection, row: _Row, outcome: Outcome) -> None:
    """The row written in this transaction says ``outcome`` instead (``ALREADY_DONE``)."""
    from locking.models import FenceEvent  # models load after the app registry

    FenceEvent.objects.using(connection.alias).filter(pk=row.id).update(outcome=outcome)
    row.outcome = outcome


def _rewrite_event(row: _Row, outcome: Outcome, detail: str, audit: AttemptAudit, *, using):
    """After the work: its committed row says how the attempt ended. Never raises on a
    database error (``record_fence_event``'s rule): logged, the row left as it was."""
    from locking.models import FenceEvent  # models load after the app registry

    _log(audit.resource, outcome, row.token, audit.attempt)
    try:
        FenceEvent.objects.using(using).filter(pk=row.id).update(
            outcome=outcome, detail=detail, at=timezone.now()
        )
    except DatabaseError:
        logger.exception(
            "could not record fence event",
            extra={"resource": audit.resource, "token": row.token, "outcome": outcome},
        )
        return
    row.outcome, row.logged = outcome, True


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


def _event_params(
    connection, resource: str, outcome: Outcome, token: int, attempt: Attempt
) -> list:
    """The values of one ``FenceEvent`` row, in ``_EVENT_COLUMNS``'s order, as the database
    takes them (an address the ``inet`` column refuses raises ``ValueError`` here)."""
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
    return [
        field.get_db_prep_save(value, connection)
        for field, value in zip(_event_fields(), values, strict=True)
    ]


@functools.cache
def _event_fields() -> tuple:
    from locking.models import FenceEvent  # models load after the app registry

    return tuple(FenceEvent._meta.get_field(name) for name in _EVENT_COLUMNS)


@functools.cache
def _insert_event(alias: str) -> str:
    """The INSERT of one ``FenceEvent`` row (``_EVENT_COLUMNS``), returning its id."""
    from locking.models import FenceEvent  # models load after the app registry

    quote = connections[alias].ops.quote_name
    columns = ", ".join(quote(field.column) for field in _event_fields())
    placeholders = ", ".join(["%s"] * len(_EVENT_COLUMNS))
    table, pk = quote(FenceEvent._meta.db_table), quote(FenceEvent._meta.pk.column)
    return f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) RETURNING {pk}"  # noqa: S608


@functools.cache
def event_insert(alias: str, source: str) -> str:
    """``INSERT`` of one ``FenceEvent`` row per row of ``source`` (a CTE of the fence's
    statement: the fenced or inserted row, so that a refused fence inserts nothing),
    ``RETURNING`` its id as ``event``. The parameters are ``fence_event``'s."""
    from locking.models import FenceEvent  # models load after the app registry

    connection = connections[alias]
    quote = connection.ops.quote_name
    fields = _event_fields()
    columns = ", ".join(quote(field.column) for field in fields)
    # Cast: in a SELECT list, PostgreSQL does not take a parameter's type from the column.
    values = ", ".join(f"CAST(%s AS {field.cast_db_type(connection)})" for field in fields)
    table, pk = quote(FenceEvent._meta.db_table), quote(FenceEvent._meta.pk.column)
    return (
        f"INSERT INTO {table} ({columns}) SELECT {values} FROM {source}"  # noqa: S608
        f" RETURNING {pk} AS event"
    )
