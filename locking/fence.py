"""The fence check: the database, not the lease, decides whether a holder may write.

``advance_fence(queryset, lease)`` runs inside the caller's ``transaction.atomic()``; so does
``insert_fenced(instance, lease)``, the same check for a row that does not exist yet (it is
inserted with the token on it). From async code, ``aadvance_fence(queryset, lease, write)``
(locking/asyncio/fence.py) runs the fence and the writes in one transaction: the fence
UPDATE must commit or roll back with the writes it protects.

Each check is one statement that does two things, in this order:

1. **Claims the resource** in its durable record (``locking_fenceepoch``, one row per
   resource, in ``LOCK_DATABASE``): the record keeps the resource's epoch and the newest
   token fenced, with the grant (owner id) that fenced it. The claim passes when the token's
   epoch is not older than the record's and the token is newer than the one recorded, or is
   the same grant's (one lease fencing again: mark started, call out, mark done). It takes
   the record's row lock: every fenced writer of a resource goes through it in turn.
2. **Fences the row** only if the claim passed: ``last_fence_token`` on exactly one row,
   set to the token if it is not above it (the row's own check is a second line: a row
   fenced under another name, or by hand).

Given a lease ``run_fenced`` (or ``LeasedAttempt``) granted, the same statement inserts the
attempt's audit row, committed, from the row it fenced (``WithFence``, locking/audit.py):
the row commits or rolls back with the writes, and costs no statement of its own.

The record is what makes the fence hold at every way in: it survives the row (an older
holder cannot re-create a row a newer one deleted), it counts one resource once whichever
rows its holders touch, and it tells the same lease from a token Redis handed out twice.
The documentation's 'The fence check' page ("Every way in") lists each entry point with
what it checks.
"""

import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from django.core.exceptions import EmptyResultSet
from django.db import connections, router
from django.db.models.expressions import Col
from django.db.models.lookups import Exact
from django.db.transaction import TransactionManagementError

from locking import guard, tracing
from locking.audit import WithFence, event_insert
from locking.conf import setting
from locking.epochs import FenceBeyondRecord
from locking.exceptions import StaleFencingToken
from locking.keys import FencingToken, LeaseOrToken, epoch_of, fencing_token_of

if TYPE_CHECKING:
    from django.db.models import Model, QuerySet

logger = logging.getLogger(__name__)

# The claim on the resource's durable record, as the first part of every fence statement.
# A resource without a record (no grant recorded its epoch here) gets one: nothing newer
# can have been recorded for it. ``EXCLUDED`` is the row the INSERT proposed.
_CLAIM = (
    "claim AS (INSERT INTO {record} AS record ({resource}, {epoch}, {started_at}, {token}, {owner})"
    " VALUES (%s, %s, now(), %s, %s)"
    " ON CONFLICT ({resource}) DO UPDATE SET {token} = EXCLUDED.{token}, {owner} = EXCLUDED.{owner}"
    " WHERE record.{epoch} <= EXCLUDED.{epoch}"
    " AND (record.{token} < EXCLUDED.{token}"
    " OR (record.{token} = EXCLUDED.{token} AND record.{owner} = EXCLUDED.{owner}))"
    " RETURNING 1)"
)


def advance_fence(queryset: "QuerySet[Model]", lease: LeaseOrToken) -> None:
    """Record the lease's token on the one row of ``queryset``, or raise ``StaleFencingToken``.

    ``lease`` is the ``Lease`` (or its ``fencing_token``); a bare ``int`` raises
    ``TypeError``. Runs inside the caller's ``transaction.atomic()`` (else
    ``TransactionManagementError``), on the database of the resource's record (else
    ``ValueError``). ``queryset`` must select exactly one row: none raises the model's
    ``DoesNotExist``, several raise ``ValueError``, and nothing is written either way.

    One statement claims the resource's record and updates the row (the module docstring).
    Both take row locks: a concurrent holder of the same resource blocks on the record's
    lock and, once the first commits, PostgreSQL re-checks its WHERE against the committed
    record (READ COMMITTED): whichever token is stale matches nothing. Raising rolls back
    everything the caller wrote in the same ``transaction.atomic()`` block.

    A lease of ``run_fenced`` (or ``LeasedAttempt``): the statement also inserts the
    attempt's audit row as committed (``lease.record_committed`` then writes nothing), once
    per lease. Any other lease or ``FencingToken``: no audit row.
    """
    fencing = fencing_token_of(lease, taken_by="advance_fence")
    connection = connections[queryset.db]
    _in_transaction_on_the_record(connection, fencing, "advance_fence")
    audit = WithFence.of(lease, connection)
    with tracing.operation_span("locking.fence", fencing.resource, token=fencing.token):
        _advance(queryset, fencing, connection, audit)


def _in_transaction_on_the_record(connection, fencing: FencingToken, name: str) -> None:
    """Refuse a fence outside a transaction, or on another database than its record's."""
    if not connection.in_atomic_block:
        raise TransactionManagementError(
            f"{name}() must run inside transaction.atomic(), in the same transaction "
            "as the writes it protects."
        )
    record = fencing.using or setting("LOCK_DATABASE")
    if connection.alias != record:
        raise ValueError(
            f"{name}(): the fenced row is in database {connection.alias!r}, but the record of "
            f"{fencing.resource!r} (its epoch and newest token) is in {record!r} "
            "(LOCK_DATABASE). The check and the write must be one transaction in one "
            "database: keep fenced models in LOCK_DATABASE."
        )


def _advance(queryset, fencing: FencingToken, connection, audit: WithFence | None) -> None:
    # The token comparisons sit in the statement's own WHERE clauses, on the rows being
    # updated: only those are re-checked against the committed rows after waiting for their
    # locks (READ COMMITTED). The queryset only picks the row: its pk given outright for a
    # plain pk filter, else its filters (relations included) in a subquery, evaluated once,
    # counted in the same statement: exactly one row, or nothing is fenced. With ``audit``,
    # the statement also inserts the attempt's audit row, from the row it fenced.
    statement = _fence_statement(queryset.model, connection.alias, audited=audit is not None)
    claim = [fencing.resource, epoch_of(fencing.token), fencing.token, fencing.owner]
    try:
        pk = _plain_pk(queryset, statement, connection)
        if pk is not None:
            sql, params = statement.by_pk, [*claim, fencing.token, pk, fencing.token]
        else:
            subquery, subquery_params = _pk_subquery(queryset, connection.alias)
            sql = statement.by_subquery.replace(PICKED, subquery, 1)
            params = [*claim, *subquery_params, fencing.token, fencing.token]
    except EmptyResultSet:  # ``.none()``, a pk out of the column's range: no row matches
        _refuse(queryset, fencing, picked=0)
    params += audit.params if audit is not None else ()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        fenced = cursor.fetchone()
    if fenced is None:
        # A row that matched, then lost to a concurrent write while it waited for the row's
        # lock, was marked by the statement but not fenced: strict mode must not take it.
        with connection.cursor() as cursor:
            cursor.execute(guard.FORGET_FENCING_SQL)
        _refuse(queryset, fencing, picked=None)
    if any(connection.savepoint_ids):  # a savepoint may undo this fence: the guard watches
        guard.watch(connection, statement.owner._meta.db_table, fenced[0])
    if audit is not None:
        audit.inserted(fenced[1], connection)


def _refuse(queryset, fencing: FencingToken, *, picked: int | None) -> NoReturn:
    """Say why nothing was fenced: no row, several rows, or a stale token (read now, after
    the statement: the failure path may take a few more queries, the fence never does)."""
    from locking.models import FenceEpoch  # models load after the app registry

    if picked is None:
        picked = queryset.count()
    if picked > 1:
        # The caller's atomic block rolls back the claim the statement may have made.
        raise ValueError(f"advance_fence() needs a queryset of one row; it matched {picked}")
    if picked == 0:
        raise queryset.model.DoesNotExist(
            f"advance_fence(): no {queryset.model._meta.label} row matches the queryset"
        )
    pk, on_row = queryset.values_list("pk", "last_fence_token").first() or (None, 0)
    row = f"{queryset.model._meta.label} pk {pk}"
    raise _stale(fencing, on_row or 0, FenceEpoch.objects.using(queryset.db), row=row)


def _stale(
    fencing: FencingToken, on_row: int, records, *, row: str = ""
) -> StaleFencingToken | FenceBeyondRecord:
    """The refusal of ``fencing``: by its epoch, if the resource has a newer one; else by
    the newest token recorded (on the resource's record or on the row). A row beyond
    every epoch the record began was never fenced so: ``FenceBeyondRecord`` names it, and
    no new epoch is started above it (the documentation's 'Epochs' page)."""
    record = records.filter(resource=fencing.resource).values("epoch", "token").first()
    epoch, on_record = (record["epoch"], record["token"]) if record else (0, 0)
    if epoch_of(on_row) > epoch:
        return FenceBeyondRecord(fencing.resource, recorded=on_row, epoch=epoch, row=row)
    recorded = max(on_row, on_record)
    if epoch > epoch_of(fencing.token):
        return StaleFencingToken(fencing.token, recorded, epoch=epoch)
    if row and on_row > on_record:
        # The row holds a token its resource's record never did: it was fenced under
        # another name (or written by hand). Say so, naming the records that hold it.
        others = records.filter(token=on_row).exclude(resource=fencing.resource)
        return StaleFencingToken(
            fencing.token,
            recorded,
            resource=fencing.resource,
            row=row,
            row_resources=tuple(others.order_by("resource").values_list("resource", flat=True)[:3]),
        )
    return StaleFencingToken(fencing.token, recorded)


def claim_fence(lease: LeaseOrToken) -> None:
    """Record the lease's token on its resource's durable record, or raise
    ``StaleFencingToken``: the fence, with no row to fence.

    What a holder commits *before* it tells the outside system anything: once a newer
    holder's claim is committed, no older holder can pass a fence of the resource again
    (``advance_fence`` and ``insert_fenced`` check the same record in the same way), so an
    older holder that already called out cannot commit after the newer one, whatever the
    order of their calls. The same grant passes again (its later fences, its commit).
    Runs in the caller's transaction if there is one (the claim is durable when that
    commits), else in autocommit; on the database of the resource's record (else
    ``ValueError``). A bare ``int`` raises ``TypeError``.
    """
    fencing = fencing_token_of(lease, taken_by="claim_fence")
    using = fencing.using or setting("LOCK_DATABASE")
    connection = connections[using]
    with (
        tracing.operation_span("locking.claim", fencing.resource, token=fencing.token),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            f"WITH {_claim_sql(using)} SELECT EXISTS (SELECT 1 FROM claim)",  # noqa: S608
            [fencing.resource, epoch_of(fencing.token), fencing.token, fencing.owner],
        )
        (claimed,) = cursor.fetchone()
    if not claimed:
        from locking.models import FenceEpoch  # models load after the app registry

        raise _stale(fencing, 0, FenceEpoch.objects.using(using))


@dataclass(frozen=True)
class _FenceStatement:
    """The fence statement of one model, as SQL built once (``_fence_statement``).

    ``by_pk``: claim, then ``UPDATE t SET last_fence_token = <set> WHERE t.pk = %s AND
    t.last_fence_token <= %s AND <claimed>``; ``by_subquery``: the same with the row picked
    by ``PICKED`` (replaced by the queryset's pk subquery) and counted. Both return the fenced
    pk; built ``audited``, the UPDATE is a CTE, ``fenced``, from whose row the attempt's
    audit row is inserted (its parameters last), and they return its id after the pk.
    ``<set>`` is ``set_fence``: the token (its one parameter), and the mark strict mode reads
    (locking/guard.py); a statement that fences a row and writes it at once sets the column
    with it too.
    """

    owner: type  # the concrete model whose table holds ``last_fence_token``
    by_pk: str
    by_subquery: str
    set_fence: str


PICKED = "/* the queryset's pk subquery */"


def _claim_sql(alias: str) -> str:
    from locking.models import FenceEpoch  # models load after the app registry

    quote = connections[alias].ops.quote_name
    opts = FenceEpoch._meta
    column = {name: quote(opts.get_field(name).column) for name in (
        "resource", "epoch", "started_at", "token", "owner"
    )}  # fmt: skip
    return _CLAIM.format(record=quote(opts.db_table), **column)


@functools.cache
def _fence_statement(model, alias: str, *, audited: bool = False) -> _FenceStatement:
    quote = connections[alias].ops.quote_name
    # The table that holds the column (a multi-table child's parent, if it declared it).
    owner = model._meta.get_field("last_fence_token").model._meta.concrete_model
    table = quote(owner._meta.db_table)
    column = quote(owner._meta.get_field("last_fence_token").column)
    pk, fence = f"{table}.{quote(owner._meta.pk.column)}", f"{table}.{column}"
    # Evaluated for the one row the WHERE lets through, before its triggers: it names the
    # row to strict mode's trigger as the one this statement fences (locking/guard.py).
    set_fence = f"{column} = {guard.fencing_sql(owner._meta.db_table, pk)}"
    update = f"UPDATE {table} SET {set_fence} WHERE "  # noqa: S608 - quoted names
    claimed = " AND EXISTS (SELECT 1 FROM claim)"

    by_pk = (f"WITH {_claim_sql(alias)}", f"{update}{pk} = %s AND {fence} <= %s{claimed}")
    by_subquery = (
        f"WITH {_claim_sql(alias)}, picked AS ({PICKED})",
        f"{update}{pk} IN (SELECT * FROM picked) AND {fence} <= %s{claimed}"  # noqa: S608
        " AND (SELECT count(*) FROM picked) = 1",
    )
    if audited:  # the audit row from the fenced row, in the same statement
        audit = f"audited AS ({event_insert(alias, 'fenced')})"
        by_pk, by_subquery = (
            f"{ctes}, fenced AS ({fence_update} RETURNING {pk} AS pk), {audit}"  # noqa: S608
            " SELECT fenced.pk, audited.event FROM fenced, audited"
            for ctes, fence_update in (by_pk, by_subquery)
        )
    else:
        by_pk, by_subquery = (
            f"{ctes} {fence_update} RETURNING {pk}" for ctes, fence_update in (by_pk, by_subquery)
        )
    return _FenceStatement(owner=owner, by_pk=by_pk, by_subquery=by_subquery, set_fence=set_fence)


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


def insert_fenced(instance: "Model", lease: LeaseOrToken) -> bool:
    """Insert ``instance``, a new row that carries the fence, with the lease's token on it.

    ``lease`` as for ``advance_fence`` (a bare ``int`` raises ``TypeError``). True:
    inserted (``instance.pk`` is set), the row fenced at the token, as if inserted with 0
    and then ``advance_fence``d, in one statement instead of two. False: nothing was
    inserted because a row with one of its unique keys exists (another holder created it,
    maybe in a transaction that just committed); the caller then fences the row that is
    there with ``advance_fence``, which answers as it always does. ``StaleFencingToken``:
    the resource's record has a newer token or epoch, whether or not the row exists (a
    newer holder may have created and deleted it), and nothing was inserted.

    Runs inside the caller's ``transaction.atomic()``, like ``advance_fence``::

        WITH claim AS (<the claim on the resource's record>),
             inserted AS (INSERT INTO <table> (last_fence_token, <other columns>)
                          SELECT %(token)s, <the instance's values>
                          WHERE EXISTS (SELECT 1 FROM claim)
                          ON CONFLICT DO NOTHING RETURNING <pk>)
        SELECT EXISTS (SELECT 1 FROM claim), (SELECT <pk> FROM inserted),
               <the row inserted, marked as fenced for strict mode (locking/guard.py)>

    A lease of ``run_fenced`` adds ``audited AS (INSERT INTO <the audit> … FROM inserted)``,
    as ``advance_fence`` does. Two creators meet on the record (and on the unique key):
    the second waits for the first's transaction and is then decided against the committed
    record. Values are prepared as ``save()`` prepares an insert's (defaults,
    ``auto_now_add``). The fence column must be the model's own, not a multi-table parent's.
    """
    fencing = fencing_token_of(lease, taken_by="insert_fenced")
    connection = connections[instance._state.db or router.db_for_write(type(instance))]
    _in_transaction_on_the_record(connection, fencing, "insert_fenced")
    audit = WithFence.of(lease, connection)
    statement = _insert_statement(
        type(instance), connection.alias, instance.pk is not None, audited=audit is not None
    )
    params = _insert_params(statement, instance, fencing, connection, audit)
    with (
        tracing.operation_span("locking.fence", fencing.resource, token=fencing.token),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement.sql, params)
        claimed, pk, _marked, *event = cursor.fetchone()
    if not claimed:
        from locking.models import FenceEpoch  # models load after the app registry

        raise _stale(fencing, 0, FenceEpoch.objects.using(connection.alias))
    if pk is None:
        return False
    instance.pk = pk
    instance.last_fence_token = fencing.token
    instance._state.adding, instance._state.db = False, connection.alias
    if any(connection.savepoint_ids):  # a savepoint may undo this fence: the guard watches
        guard.watch(connection, type(instance)._meta.db_table, pk)
    if audit is not None:
        audit.inserted(event[0], connection)
    return True


def _insert_params(statement, instance, fencing: FencingToken, connection, audit) -> list:
    """The claim's parameters, the token, the instance's values (as ``save()`` prepares an
    insert's), and the audit row's, in ``statement``'s order."""
    params = [fencing.resource, epoch_of(fencing.token), fencing.token, fencing.owner]
    params.append(fencing.token)
    params += (
        field.get_db_prep_save(field.pre_save(instance, True), connection)
        for field in statement.fields
    )
    return params + audit.params if audit is not None else params


@dataclass(frozen=True)
class _InsertStatement:
    """``insert_fenced``'s statement for one model, built once, and the fields whose values
    follow the claim's parameters and the token."""

    sql: str
    fields: tuple


@functools.cache
def _insert_statement(model, alias: str, with_pk: bool, *, audited: bool) -> _InsertStatement:
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
    pk = quote(opts.pk.column)
    # The inserted row counts as fenced in its transaction (strict mode, locking/guard.py).
    mark = guard.fenced_sql(opts.db_table, pk)
    # With ``audited``, the attempt's audit row, inserted from the row inserted (if any).
    audit = f", audited AS ({event_insert(alias, 'inserted')})" if audited else ""
    sql = (
        f"WITH {_claim_sql(alias)}, inserted AS ("  # noqa: S608 - quoted names
        f"INSERT INTO {quote(opts.db_table)} ({columns}) SELECT {values}"
        f" WHERE EXISTS (SELECT 1 FROM claim) ON CONFLICT DO NOTHING RETURNING {pk}){audit}"
        f" SELECT EXISTS (SELECT 1 FROM claim), (SELECT {pk} FROM inserted),"
        f" (SELECT {mark} FROM inserted)" + (", (SELECT event FROM audited)" if audited else "")
    )
    return _InsertStatement(sql=sql, fields=fields)
