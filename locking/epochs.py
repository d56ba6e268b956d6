"""Durable fence epochs: why a token granted before Redis lost its data can never win after.

A fencing token is one ``bigint``: ``epoch * 2**32 + sequence``. Redis counts the sequence
(``INCR fence:{r}``); PostgreSQL keeps, per resource, the last epoch handed to Redis
(``locking_fenceepoch``). Redis may forget the counter (restart without persistence,
FLUSHALL, a crash): grants made before the loss may still be held by paused processes that
have not written yet, and the database cannot know their numbers. Reseeding the counter to
the token the database recorded would hand those numbers out again. Instead, the first
grant that finds the counter missing starts a new epoch:

1. bump the resource's epoch in PostgreSQL and commit (``begin_epoch``): the epoch is
   durable before any token of it exists, so two losses in a row never reuse an epoch;
2. raise the Redis counter to the first token of that epoch (a Lua compare-and-set that
   never lowers it) in the same script as the grant.

Every token of the new epoch is then above every token of every older epoch, whatever the
database recorded. ``advance_fence`` also refuses a token whose epoch is older than the
resource's durable epoch, which covers a process that paused between its bump and its
Redis seed while others bumped, seeded and lost Redis again.

Bounds: 2**32 - 1 grants per epoch per resource (the grant script then asks for a new
epoch instead of wrapping) and ``MAX_EPOCH`` epochs per resource (Lua numbers are doubles,
exact below 2**53; past it grants are refused with ``LockUnavailable``).
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from asgiref.sync import sync_to_async
from django.db import connections

from locking import metrics
from locking.conf import setting
from locking.exceptions import LockUnavailable
from locking.outcomes import EpochCause

logger = logging.getLogger(__name__)

SEQUENCE_BITS = 32
EPOCH_SPAN = 2**SEQUENCE_BITS
MAX_EPOCH = 2 ** (53 - SEQUENCE_BITS) - 1


def epoch_of(token: int) -> int:
    """Return the epoch a token was granted in."""
    return int(token) >> SEQUENCE_BITS


def first_token(epoch: int) -> int:
    """Return the counter value that starts ``epoch`` (its first grant gets this + 1)."""
    return int(epoch) * EPOCH_SPAN


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
    metrics.epochs_started(resource, EpochCause.FIRST_GRANT if epoch == 0 else cause)
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
