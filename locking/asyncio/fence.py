"""``aadvance_fence``: the fence and the writes it protects from async code, in one
transaction run in one ``sync_to_async(thread_sensitive=True)`` call (locking/fence.py has
the fence itself)."""

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from asgiref.sync import sync_to_async
from django.db import transaction

from locking import tracing
from locking.fence import advance_fence
from locking.keys import LeaseOrToken, fencing_token_of

if TYPE_CHECKING:
    from django.db.models import Model, QuerySet

T = TypeVar("T")


async def aadvance_fence(
    queryset: "QuerySet[Model]", lease: LeaseOrToken, write: Callable[[], T]
) -> T:
    """Advance the fence and run ``write()`` in one transaction; return what it returns.

    The async form of::

        with transaction.atomic(using=queryset.db):
            advance_fence(queryset, lease)
            return write()

    run as one ``sync_to_async(thread_sensitive=True)`` call: Django's transactions are
    synchronous (``transaction.atomic`` has no async form, and each async ORM call such as
    ``aupdate`` is its own ``sync_to_async`` hop, in autocommit unless that thread happens
    to be inside an atomic block); thread-sensitive is the thread Django's async ORM uses,
    so the block shares its connection. ``write`` is synchronous ORM code.
    ``StaleFencingToken`` (or anything ``write`` raises) rolls the whole block back.
    """
    fencing = fencing_token_of(lease, taken_by="aadvance_fence")

    def fenced_commit() -> T:
        with (
            tracing.operation_span("locking.fenced_commit", fencing.resource, token=fencing.token),
            transaction.atomic(using=queryset.db),
        ):
            advance_fence(queryset, lease)  # the lease: its attempt's audit row too
            return write()

    return await sync_to_async(fenced_commit, thread_sensitive=True)()
