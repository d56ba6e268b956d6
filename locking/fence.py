"""The fence check: the database, not the lease, decides whether a holder may write."""

import logging

from django.db import connections
from django.db.models import Exists
from django.db.transaction import TransactionManagementError

from locking.epochs import current_epoch, epoch_of
from locking.exceptions import StaleFencingToken
from locking.lock import Lease

logger = logging.getLogger(__name__)


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
