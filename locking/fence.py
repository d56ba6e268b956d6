"""The fence check: the database, not the lease, decides whether a holder may write.

``advance_fence`` runs inside the caller's ``transaction.atomic()``; so does
``insert_fenced``, the same check for a row that does not exist yet (it is inserted with
the token on it). From async code,
``aadvance_fence(queryset, lease, write)`` runs the fence and the writes in one
transaction, in one ``sync_to_async(thread_sensitive=True)`` call: the fence UPDATE must
commit or roll back with the writes it protects, and Django's transactions are
synchronous (``transaction.atomic`` has no async form, and each async ORM call such as
``aupdate`` is its own ``sync_to_async`` hop, in autocommit unless that thread happens to
be inside an atomic block). Thread-sensitive is the thread Django's async ORM uses, so the
block shares its connection.
"""

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from asgiref.sync import sync_to_async
from django.core.exceptions import EmptyResultSet
from django.db import connections, router, transaction
from django.db.models.expressions import Col
from django.db.models.lookups import Exact
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
    token, resource = _checked(connections[queryset.db], "advance_fence", token, resource)
    with tracing.operation_span("locking.fence", resource, token=token):
        _advance(queryset, token, resource)


def _checked(connection, name: str, token, resource: str | None) -> tuple[int, str | None]:
    """The token and resource a fence check uses (a lease gives both), once it is known to
    run inside the caller's transaction: else ``TransactionManagementError``."""
    if not connection.in_atomic_block:
        raise TransactionManagementError(
            f"{name}() must run inside transaction.atomic(), in the same transaction "
            "as the writes it protects."
        )
    if isinstance(token, Lease):
        return int(token.token), resource or token.resource
    return int(token), resource


def _advance(queryset, token: int, resource: str | None) -> None:
    # The token comparison and the epoch check must sit in the UPDATE's own WHERE, on the
    # row being updated: only that is re-checked against the committed row after waiting
    # for its lock (READ COMMITTED). Inside an "id IN (SELECT …)" subquery, evaluated once
    # on the old snapshot, a stale holder blocked behind a newer one would overwrite the
    # newer token. So the queryset only picks the row (its pk: given outright for a plain
    # pk filter, else its filters, relations included, in such a subquery), and the
    # statement, built once per model, compares the token on the row itself.
    connection = connections[queryset.db]
    statement = _fence_statement(queryset.model, connection.alias)
    try:
        if (pk := _plain_pk(queryset, statement, connection)) is not None:
            sql, params = statement.by_pk, [token, pk, token]
        else:
            subquery, subquery_params = _pk_subquery(queryset, connection.alias)
            sql = statement.by_subquery_head + subquery + statement.by_subquery_tail
            params = [token, *subquery_params, token]
    except EmptyResultSet:  # ``.none()``, a pk out of the column's range: no row matches
        _refuse(queryset, token, resource, updated=0)
    if resource is not None:
        sql += statement.no_newer_epoch
        params += [resource, epoch_of(token)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        updated = cursor.rowcount
    if updated != 1:
        _refuse(queryset, token, resource, updated)


def _refuse(queryset, token: int, resource: str | None, updated: int) -> NoReturn:
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


@dataclass(frozen=True)
class _FenceStatement:
    """The fence UPDATE of one model, as SQL built once (``_fence_statement``).

    ``by_pk``: ``UPDATE t SET last_fence_token = %s WHERE t.pk = %s AND t.last_fence_token
    < %s``; ``by_subquery_head`` + the pk subquery + ``by_subquery_tail``: the same with
    ``t.pk IN (subquery)``; ``no_newer_epoch`` is appended when the resource is known:
    ``AND NOT EXISTS (SELECT 1 FROM locking_fenceepoch WHERE resource = %s AND epoch > %s)``.
    """

    owner: type  # the concrete model whose table holds ``last_fence_token``
    by_pk: str
    by_subquery_head: str
    by_subquery_tail: str
    no_newer_epoch: str


@functools.cache
def _fence_statement(model, alias: str) -> _FenceStatement:
    from locking.models import FenceEpoch  # models load after the app registry

    quote = connections[alias].ops.quote_name
    # The table that holds the column (a multi-table child's parent, if it declared it).
    owner = model._meta.get_field("last_fence_token").model._meta.concrete_model
    table = quote(owner._meta.db_table)
    pk = f"{table}.{quote(owner._meta.pk.column)}"
    fence = quote(owner._meta.get_field("last_fence_token").column)
    update = f"UPDATE {table} SET {fence} = %s WHERE {pk} "  # noqa: S608 - quoted names
    tail = f" AND {table}.{fence} < %s"
    epochs = FenceEpoch._meta
    no_newer_epoch = (
        f" AND NOT EXISTS (SELECT 1 FROM {quote(epochs.db_table)}"  # noqa: S608 - quoted names
        f" WHERE {quote(epochs.get_field('resource').column)} = %s"
        f" AND {quote(epochs.get_field('epoch').column)} > %s)"
    )
    return _FenceStatement(
        owner=owner,
        by_pk=update + "= %s" + tail,
        by_subquery_head=update + "IN (",
        by_subquery_tail=")" + tail,
        no_newer_epoch=no_newer_epoch,
    )


def _plain_pk(queryset, statement: _FenceStatement, connection):
    """The pk of ``Model.objects.filter(pk=value)`` (one exact pk filter on the table of
    the fence column, nothing else), as the database takes it; else ``None``. For such a
    queryset ``pk IN (SELECT pk … WHERE pk = value)`` is ``pk = value``. Raises
    ``EmptyResultSet`` when no row can have that pk (an integer out of the column's range).
    """
    query = queryset.query
    where = query.where
    if (
        len(where.children) != 1
        or where.negated
        or len(query.alias_map) != 1
        or query.combinator
        or query.is_sliced
        or query.distinct
        or query.model._meta.concrete_model is not statement.owner
    ):
        return None
    lookup = where.children[0]
    if (
        not isinstance(lookup, Exact)
        or not isinstance(lookup.lhs, Col)
        or lookup.lhs.alias != query.base_table
        or lookup.lhs.target is not statement.owner._meta.pk
    ):
        return None
    # The lookup's own preparation of its value (Django's field-specific exact lookups
    # refuse an out-of-range integer, or compare with an expression: no fast path then).
    rhs_sql, rhs_params = lookup.process_rhs(query.get_compiler(connection=connection), connection)
    if rhs_sql != "%s" or len(rhs_params) != 1 or rhs_params[0] is None:
        return None
    return rhs_params[0]


def _pk_subquery(queryset, alias: str) -> tuple[str, tuple]:
    """``SELECT pk FROM … WHERE …`` of ``queryset``, compiled for its own database."""
    query = queryset.values("pk").query
    query.clear_ordering(force=False)  # kept when it decides which rows a slice takes
    return query.get_compiler(using=alias).as_sql()


def insert_fenced(instance, token, *, resource: str | None = None) -> bool:
    """Insert ``instance``, a new row that carries the fence, with ``token`` already on it.

    ``token`` is the lease (preferred) or its ``token``, as for ``advance_fence``; with a
    lease, or with ``resource``, the epoch check applies too. True: inserted
    (``instance.pk`` is set), the row fenced at the token, as if inserted with 0 and then
    ``advance_fence``d, in one statement instead of two. False: nothing was inserted,
    because a row with one of its unique keys exists (another holder created it, maybe in a
    transaction that just committed) or the resource has an epoch newer than the token's;
    the caller then fences the row that is there (or creates one and fences it) with
    ``advance_fence``, which answers as it always does: stale, or go on.

    Runs inside the caller's ``transaction.atomic()``, like ``advance_fence``::

        INSERT INTO <table> (last_fence_token, <every other concrete column>)
        SELECT %(token)s, <the instance's values>
        [WHERE NOT EXISTS (SELECT 1 FROM locking_fenceepoch
                           WHERE resource = %(resource)s AND epoch > %(token_epoch)s)]
        ON CONFLICT DO NOTHING RETURNING <pk>

    Why it is the fence: a row that does not exist has seen no token, so any granted token
    (> 0) passes ``last_fence_token < token``, and the epoch check is the ``UPDATE``'s. Two
    creators meet on the unique key: the second waits for the first's transaction and,
    once that commits, inserts nothing; it fences the committed row, where the older token
    of the two loses. Values are prepared as ``save()`` prepares an insert's (defaults,
    ``auto_now_add``). The fence column must be the model's own, not a multi-table parent's.
    """
    connection = connections[instance._state.db or router.db_for_write(type(instance))]
    token, resource = _checked(connection, "insert_fenced", token, resource)
    statement = _insert_statement(type(instance), connection.alias, instance.pk is not None)
    params = [token]
    params += (
        field.get_db_prep_save(field.pre_save(instance, True), connection)
        for field in statement.fields
    )
    sql = statement.head
    if resource is not None:
        sql += statement.where_no_newer_epoch
        params += [resource, epoch_of(token)]
    with (
        tracing.operation_span("locking.fence", resource, token=token),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql + statement.tail, params)
        row = cursor.fetchone()
    if row is None:
        return False
    instance.pk = row[0]
    instance.last_fence_token = token
    instance._state.adding, instance._state.db = False, connection.alias
    return True


@dataclass(frozen=True)
class _InsertStatement:
    """``insert_fenced``'s statement for one model, built once: ``head`` [+
    ``where_no_newer_epoch``] + ``tail``, and the fields whose values follow the token."""

    head: str
    where_no_newer_epoch: str
    tail: str
    fields: tuple


@functools.cache
def _insert_statement(model, alias: str, with_pk: bool) -> _InsertStatement:
    # An auto primary key is the database's to give, unless the instance has one (as
    # ``save()`` does, the insert then names it: a row with that key is a conflict).
    connection = connections[alias]
    quote = connection.ops.quote_name
    opts = model._meta
    fence = opts.get_field("last_fence_token")
    if fence.model._meta.concrete_model is not opts.concrete_model:
        raise ValueError(f"insert_fenced(): {opts.label}'s fence column is a parent's")
    fields = tuple(
        field
        for field in opts.local_concrete_fields
        if field is not fence and (with_pk or not (field.primary_key and field.db_returning))
    )
    columns = ", ".join(quote(field.column) for field in (fence, *fields))
    # Cast: in a SELECT list, PostgreSQL does not take a parameter's type from the column.
    values = ", ".join(
        f"CAST(%s AS {field.cast_db_type(connection)})" for field in (fence, *fields)
    )
    no_newer_epoch = _fence_statement(model, alias).no_newer_epoch
    return _InsertStatement(
        head=f"INSERT INTO {quote(opts.db_table)} ({columns}) SELECT {values}",
        where_no_newer_epoch=" WHERE" + no_newer_epoch.removeprefix(" AND"),
        tail=f" ON CONFLICT DO NOTHING RETURNING {quote(opts.pk.column)}",
        fields=fields,
    )


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
