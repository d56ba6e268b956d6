"""The fence check: the database, not the lease, decides whether a holder may write."""

import logging
from collections.abc import Callable
from typing import TypeVar

from django.db import connections
from django.db.transaction import TransactionManagementError

from locking.exceptions import StaleFencingToken

logger = logging.getLogger(__name__)

T = TypeVar("T")


def advance_fence(queryset, token: int) -> None:
    """Record ``token`` on the one row of ``queryset``, or raise ``StaleFencingToken``.

    Runs ``UPDATE … SET last_fence_token = token WHERE pk IN (<queryset>) AND
    last_fence_token < token`` inside the caller's transaction. The UPDATE takes the row
    lock, so a concurrent holder blocks on it and, once the first commits, PostgreSQL
    re-checks the WHERE against the committed value (READ COMMITTED): whichever token is
    stale matches no row. Raising rolls back everything the caller wrote in the same
    ``transaction.atomic()`` block.
    """
    connection = connections[queryset.db]
    if not connection.in_atomic_block:
        raise TransactionManagementError(
            "advance_fence() must run inside transaction.atomic(), in the same transaction "
            "as the writes it protects."
        )
    token = int(token)
    # The token comparison must sit in the UPDATE's own WHERE, on the row being updated:
    # only that is re-checked against the committed row after waiting for its lock. A
    # queryset filtering across a relation would make Django move the whole WHERE into an
    # "id IN (SELECT …)" subquery, evaluated once on the old snapshot, and a stale holder
    # blocked behind a newer one would then overwrite the newer token.
    rows = queryset.model._base_manager.using(queryset.db).filter(pk__in=queryset.values("pk"))
    updated = rows.filter(last_fence_token__lt=token).update(last_fence_token=token)
    if updated == 1:
        return
    if updated > 1:
        # The caller's atomic block rolls back all the rows just touched.
        raise ValueError(f"advance_fence() needs a queryset of one row; it matched {updated}")
    recorded = queryset.values_list("last_fence_token", flat=True).first()
    if recorded is None:
        raise queryset.model.DoesNotExist(
            f"advance_fence(): no {queryset.model._meta.label} row matches the queryset"
        )
    raise StaleFencingToken(token, recorded)


def retry_after_counter_loss(
    attempt: Callable[[], T],
    *,
    resource: str,
    lock,
    on_reseed: Callable[[StaleFencingToken], None] | None = None,
) -> T:
    """Run ``attempt()``; if Redis lost the fence counter, reseed it and run it once more.

    ``attempt`` acquires its own lease, does the fenced work and releases. When it raises
    ``StaleFencingToken`` the two cases are told apart by the Redis counter:

    - at or above the recorded token: a newer holder really did take over. Re-raise.
      (Unless the rejected token *equals* the recorded one: that is a lost counter too.)
    - below the recorded token: Redis restarted without its data (or failed over to a
      replica that missed writes) and is issuing low tokens that can never win. Raise the
      counter to the recorded token (never lowering it) and try once more; the next grant
      then gets a token above everything the database has seen.
    """
    try:
        return attempt()
    except StaleFencingToken as exc:
        current = lock.current_token(resource)
        # A token is granted once, so a rejected token *equal* to the recorded one was
        # issued a second time: the counter restarted too (it just caught up exactly).
        if current >= exc.recorded and exc.token < exc.recorded:
            raise
        logger.warning(
            "fence counter below the database's token; reseeding and retrying once",
            extra={"resource": resource, "token": exc.token, "recorded": exc.recorded},
        )
        if on_reseed is not None:
            on_reseed(exc)
        lock.reseed(resource, exc.recorded)
        return attempt()
