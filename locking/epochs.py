"""Durable fence epochs: why a token granted before Redis lost its data can never win after.

A token is ``epoch * 2**32 + sequence``: Redis counts the sequence, PostgreSQL keeps each
resource's last epoch (``locking_fenceepoch``). The first grant that finds the counter
missing records a new epoch and commits it (``begin_epoch``) before any token of it exists.
The record also bounds what a row may say (``FenceBeyondRecord``, ``repair_fence_row``).
Why and how: the documentation's 'Epochs' page.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.db import connections, transaction

from locking import tracing
from locking.audit import record_fence_event
from locking.conf import setting
from locking.exceptions import LockError, LockUnavailable
from locking.guard import FENCED_SETTING, NEVER_BACK
from locking.keys import SEQUENCE_BITS, epoch_of
from locking.outcomes import EpochCause, Outcome

logger = logging.getLogger(__name__)

EPOCH_SPAN = 2**SEQUENCE_BITS
MAX_EPOCH = 2 ** (53 - SEQUENCE_BITS) - 1


def first_token(epoch: int) -> int:
    """Return the counter value that starts ``epoch`` (its first grant gets this + 1)."""
    return int(epoch) * EPOCH_SPAN


def last_token(epoch: int) -> int:
    """Return the highest token ``epoch`` can grant (its sequence's last number)."""
    return first_token(int(epoch) + 1) - 1


class FenceBeyondRecord(LockUnavailable):
    """A fenced row's ``last_fence_token`` (``recorded``) is beyond every token its
    resource's record could have granted: its epoch is past ``epoch``, the last one the
    record began. A corrupt row (``update(last_fence_token=…)`` by hand, an old fixture),
    not a Redis counter that went back: nothing was written and no epoch was started.
    ``row`` names it (``app_label.Model pk …``) when the fence saw it.

    A ``LockUnavailable``: the resource cannot be written until an operator repairs the
    row (``manage.py locks repair``; system check ``locking.E016`` lists such rows).
    """

    def __init__(self, resource: str, *, recorded: int, epoch: int, row: str = ""):
        self.recorded = recorded
        self.epoch = epoch
        self.row = row
        super().__init__(
            resource,
            f"fenced row {row + ' ' if row else ''}records token {recorded}, beyond the last "
            f"token of epoch {epoch} ({last_token(epoch)}), the newest its record began "
            "(locking.E016: repair it with manage.py locks repair)",
        )


# A new resource starts at epoch ``floor`` (0: tokens 1, 2, 3…); a known one moves to the
# next epoch, or to ``floor`` if that is higher. One statement, committed on its own.
_BEGIN_EPOCH_SQL = """
INSERT INTO locking_fenceepoch (resource, epoch, started_at)
VALUES (%(resource)s, %(floor)s, now())
ON CONFLICT (resource) DO UPDATE
    SET epoch = GREATEST(locking_fenceepoch.epoch + 1, %(floor)s), started_at = now()
RETURNING epoch
"""


def begin_epoch(resource: str, *, floor: int = 0, using: str | None = None) -> int:
    """Record and return the next epoch of ``resource``: durable before this returns.

    Runs in its own transaction. Inside a caller's ``transaction.atomic()`` a rollback
    would undo the bump after Redis had already handed out tokens of the epoch, so there
    it uses a connection of its own.
    """
    with _autocommit_connection(using) as connection, connection.cursor() as cursor:
        cursor.execute(_BEGIN_EPOCH_SQL, {"resource": resource, "floor": int(floor)})
        epoch = int(cursor.fetchone()[0])
    # Epoch 0 is a resource's first grant ever; a later one means Redis lost the counter.
    logger.log(
        logging.WARNING if epoch else logging.DEBUG,
        "fence epoch started",
        extra={"resource": resource, "epoch": epoch, "token": first_token(epoch)},
    )
    return epoch


# The first epoch of resources that have none, in one statement: the ones returned are new.
# Sorted, so two callers inserting overlapping sets take the rows' locks in the same order.
_FIRST_EPOCHS_SQL = """
INSERT INTO locking_fenceepoch (resource, epoch, started_at)
SELECT resource, 0, now() FROM unnest(%(resources)s::text[]) AS resource ORDER BY resource
ON CONFLICT (resource) DO NOTHING
RETURNING resource
"""


def begin_first_epochs(resources, *, using: str | None = None) -> list[str]:
    """Record epoch 0 for each of ``resources`` that has no epoch yet; return those.

    What the first grant of each would record one at a time (``begin_epoch`` of a resource
    without a row), in one statement and one commit, durable before this returns. A
    resource that already has an epoch is left alone: a grant that finds its counter
    missing still records its next epoch itself.
    """
    with _autocommit_connection(using) as connection, connection.cursor() as cursor:
        cursor.execute(_FIRST_EPOCHS_SQL, {"resources": sorted(set(resources))})
        new = [resource for (resource,) in cursor.fetchall()]
    logger.debug("fence epochs started", extra={"count": len(new), "epoch": 0})
    return new


def start_epoch(
    resource: str,
    *,
    above: int = 0,
    using: str | None = None,
    cause: EpochCause = EpochCause.COUNTER_LOST,
) -> int:
    """Record a new epoch of ``resource`` in the database; return its first token.

    What a grant does when Redis has no counter for the resource (step 1 above), and
    ``run_fenced`` when the counter is behind. The epoch is the one after the recorded
    epoch (a resource with none starts at 0), and, when ``above`` is a token known to be
    granted, above that token's epoch. Raises ``LockUnavailable`` when the resource has
    used up its epochs. ``cause`` is counted (``fence_epochs_started_total``); a
    resource's epoch 0 is always its first grant.
    """
    floor_epoch = epoch_of(above) + 1 if above else 0
    epoch = begin_epoch(resource, floor=floor_epoch, using=using)
    tracing.epochs_started(resource, EpochCause.FIRST_GRANT if epoch == 0 else cause)
    if epoch > MAX_EPOCH:
        raise LockUnavailable(resource, f"fence epochs exhausted (epoch {epoch})")
    return first_token(epoch)


async def astart_epoch(
    resource: str,
    *,
    above: int = 0,
    using: str | None = None,
    cause: EpochCause = EpochCause.COUNTER_LOST,
) -> int:
    """``start_epoch()`` from async code: the same committed write, in the thread Django's
    async ORM uses (``sync_to_async(thread_sensitive=True)``)."""
    return await sync_to_async(start_epoch, thread_sensitive=True)(
        resource, above=above, using=using, cause=cause
    )


@contextmanager
def _autocommit_connection(using: str | None) -> Iterator:
    """Django's connection to ``using`` (default ``LOCK_DATABASE``), whose statement
    commits on its own; inside a caller's ``transaction.atomic()``, where a rollback would
    undo an epoch Redis may already be handing out, a connection of its own, closed
    afterwards."""
    using = using or setting("LOCK_DATABASE")
    connection = connections[using]
    if not connection.in_atomic_block:
        yield connection
        return
    own = connections.create_connection(using)
    try:
        yield own
    finally:
        own.close()


def current_epoch(resource: str, *, using: str | None = None) -> int:
    """Return the durable epoch of ``resource`` (0 if it never had one)."""
    with connections[using or setting("LOCK_DATABASE")].cursor() as cursor:
        cursor.execute("SELECT epoch FROM locking_fenceepoch WHERE resource = %s", [resource])
        row = cursor.fetchone()
    return int(row[0]) if row else 0


# -- a row beyond its record ---------------------------------------------------------------


class FenceRowChanged(LockError):
    """The row's ``last_fence_token`` is not the one the operator named (``token``): it is
    ``current`` now (``None``: the row is gone). Nothing was repaired."""

    def __init__(self, resource: str, *, row: str, token: int, current: int | None):
        self.resource = resource
        self.row = row
        self.token = token
        self.current = current
        super().__init__(f"{row} records token {current}, not {token}: nothing was repaired")


@dataclass(frozen=True)
class RepairedFence:
    """What ``repair_fence_row`` did: ``row`` of ``resource`` went from ``was`` to ``now``,
    the last token ``epoch`` (the record's) could have granted."""

    resource: str
    row: str
    was: int
    now: int
    epoch: int


def repair_fence_row(
    model, pk, *, resource: str, token: int, by: str, reason: str, using: str | None = None
) -> RepairedFence:
    """Set back a fenced row whose ``last_fence_token`` is beyond its resource's record.

    ``token`` is the value the operator saw on the row (``locking.E016`` names it): the
    repair is a compare-and-set on it, to ``last_token`` of the resource's durable epoch,
    the lowest value above every token the record could have granted (a paused holder of
    the current epoch stays refused). The next grant is then refused once, as for a counter
    behind, and starts the next epoch. The guard's trigger that keeps the column from
    going down is disabled for the one ``UPDATE``, inside the same transaction (its
    ``ALTER TABLE`` locks the table: no other session sees it disabled). Recorded in the
    audit (operation ``repair-fence``, who, why, both values).

    Raises ``ValueError`` when ``token`` is within what the record could have granted
    (nothing to repair), ``FenceRowChanged`` when the row does not hold ``token`` now.
    """
    if not by.strip() or not reason.strip():
        raise ValueError("repair_fence_row() needs who repairs (by=…) and a reason")
    using = using or setting("LOCK_DATABASE")
    opts = model._meta
    connection = connections[using]
    quote = connection.ops.quote_name
    table, pk_column = quote(opts.db_table), quote(opts.pk.column)
    column = quote(opts.get_field("last_fence_token").column)
    pk = opts.pk.to_python(pk)
    row = f"{opts.label} pk {pk}"
    with transaction.atomic(using=using), connection.cursor() as cursor:
        epoch, ceiling = _epoch_beneath(cursor, resource, token)
        cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER {quote(NEVER_BACK)}")
        # Under the record's lock, the repair is this row's fenced write (strict mode).
        cursor.execute(
            "SELECT set_config(%s, coalesce(current_setting(%s, true), '') || %s, true)",
            [FENCED_SETTING, FENCED_SETTING, f" {opts.db_table}:{pk} "],
        )
        cursor.execute(
            f"UPDATE {table} SET {column} = %s WHERE {pk_column} = %s AND {column} = %s",  # noqa: S608
            [ceiling, pk, token],
        )
        repaired = cursor.rowcount
        cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER {quote(NEVER_BACK)}")
        if repaired != 1:
            cursor.execute(f"SELECT {column} FROM {table} WHERE {pk_column} = %s", [pk])  # noqa: S608
            current = cursor.fetchone()
            raise FenceRowChanged(
                resource, row=row, token=token, current=int(current[0]) if current else None
            )
    repair = RepairedFence(resource=resource, row=row, was=token, now=ceiling, epoch=epoch)
    _record_repair(repair, by=by, reason=reason, using=using)
    return repair


def _epoch_beneath(cursor, resource: str, token: int) -> tuple[int, int]:
    """The durable epoch of ``resource`` and its last token, read under the record's row
    lock (no epoch begins for the resource while the repair runs); ``ValueError`` when
    ``token`` is one the record could have granted."""
    cursor.execute(
        "SELECT epoch FROM locking_fenceepoch WHERE resource = %s FOR UPDATE", [resource]
    )
    found = cursor.fetchone()
    epoch = int(found[0]) if found else 0
    ceiling = last_token(epoch)
    if token <= ceiling:
        raise ValueError(
            f"token {token} is within epoch {epoch} of {resource} (at most {ceiling}): "
            "a token the record could have granted, not a corrupt one; nothing to repair"
        )
    return epoch, ceiling


def _record_repair(repair: RepairedFence, *, by: str, reason: str, using: str) -> None:
    """Log the repair and record it in the audit: who, why, both values."""
    logger.warning(
        "fenced row beyond its record repaired",
        extra={
            "resource": repair.resource,
            "token": repair.now,
            "row": repair.row,
            "was": repair.was,
        },
    )
    record_fence_event(
        resource=repair.resource,
        outcome=Outcome.COMMITTED,
        token=repair.now,
        actor=by,
        detail=(
            f"last_fence_token of {repair.row} repaired from {repair.was} to {repair.now}, "
            f"the last token of epoch {repair.epoch}: {reason.strip()}"
        ),
        operation=REPAIR_OPERATION,
        using=using,
    )


# The audit's operation name of a repaired row.
REPAIR_OPERATION = "repair-fence"
