"""The fence check: the database, not the lease, decides whether a holder may write.

``advance_fence`` runs inside the caller's ``transaction.atomic()``. From async code,
``aadvance_fence(queryset, lease, write)`` runs the fence and the writes in one
transaction, in one ``sync_to_async(thread_sensitive=True)`` call: the fence UPDATE must
commit or roll back with the writes it protects, and Django's transactions are
synchronous (``transaction.atomic`` has no async form, and each async ORM call such as
``aupdate`` is its own ``sync_to_async`` hop, in autocommit unless that thread happens to
be inside an atomic block). Thread-sensitive is the thread Django's async ORM uses, so the
block shares its connection.
"""

import logging
from collections.abc import Callable
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.db.models import Exists
from django.db.transaction import TransactionManagementError

from locking import tracing
from locking.epochs import current_epoch, epoch_of
from locking.exceptions import StaleFencingToken
from locking.lease import Lease

logger = logging.getLogger(__name__)


T = TypeVar("T")


def advance_fence(queryset, token, *, resource: str | None = None) -> None:
    """Record ``token`` on the one row of ``queryset``, or raise ``StaleFencingToken``.

    ``token`` is the lease itself (preferred) or its ``token``; with a lease, or with
    ``resource``, the check also refuses a token of an epoch older than the resource's
    durable epoch (see locking/epochs.py).

    Runs ``UPDATE … SET last_fence_token = token WHERE pk IN (<queryset>) AND
    last_fence_token < token [AND no newer epoch is recorded]`` inside the caller's
    transaction. The UPDATE takes the row lock, so a concurrent holder blocks on it and,
    once the first commits, PostgreSQL re-checks the WHERE against the committed value
    (READ COMMITTED): whichever token is stale matches no row. Raising rolls back
    everything the caller wrote in the same ``transaction.atomic()`` block.
    """
    connection = connections[queryset.db]
    if not connection.in_atomic_block:
        raise TransactionManagementError(
            "advance_fence() must run inside transaction.atomic(), in the same transaction "
            "as the writes it protects."
        )
    if isinstance(token, Lease):
        resource = resource or token.resource
        token = token.token
    token = int(token)
    with tracing.operation_span("locking.fence", resource, token=token):
        _advance(queryset, token, resource)


def _advance(queryset, token: int, resource: str | None) -> None:
    # The token comparison must sit in the UPDATE's own WHERE, on the row being updated:
    # only that is re-checked against the committed row after waiting for its lock. A
    # queryset filtering across a relation would make Django move the whole WHERE into an
    # "id IN (SELECT …)" subquery, evaluated once on the old snapshot, and a stale holder
    # blocked behind a newer one would then overwrite the newer token.
    rows = queryset.model._base_manager.using(queryset.db).filter(pk__in=queryset.values("pk"))
    rows = rows.filter(last_fence_token__lt=token)
    if resource is not None:
        from locking.models import FenceEpoch  # models load after the app registry

        newer_epoch = FenceEpoch.objects.using(queryset.db).filter(
            resource=resource, epoch__gt=epoch_of(token)
        )
        rows = rows.exclude(Exists(newer_epoch))
    updated = rows.update(last_fence_token=token)
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
    if recorded < token and resource is not None:
        raise StaleFencingToken(token, recorded, epoch=current_epoch(resource, using=queryset.db))
    raise StaleFencingToken(token, recorded)


async def aadvance_fence(
    queryset, lease: Lease, write: Callable[[], T], *, resource: str | None = None
) -> T:
    """Advance the fence and run ``write()`` in one transaction; return what it returns.

    The async form of::

        with transaction.atomic(using=queryset.db):
            advance_fence(queryset, lease)
            return write()

    run as one ``sync_to_async(thread_sensitive=True)`` call (see the module docstring for
    why not the async ORM). ``write`` is synchronous ORM code. ``StaleFencingToken`` (or
    anything ``write`` raises) rolls the whole block back.
    """

    def fenced_commit() -> T:
        with (
            tracing.operation_span(
                "locking.fenced_commit", resource or lease.resource, token=lease.token
            ),
            transaction.atomic(using=queryset.db),
        ):
            advance_fence(queryset, lease, resource=resource)
            return write()

    return await sync_to_async(fenced_commit, thread_sensitive=True)()
