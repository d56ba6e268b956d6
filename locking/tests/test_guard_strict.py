"""The strict fence guard (issue 45, item 3): on a table written only under a fence, an
UPDATE or DELETE of a row its transaction has not fenced is refused.

The adopter's three unfenced writes each overwrote a newer holder's value: a stale holder's
plain ``update()``, a ``save()`` after a swallowed ``StaleFencingToken``, and the fence in
one ``atomic()`` with the write in the next. Each runs here with the guard strict (refused,
the newer value kept) and plain (the overwrite happens: what strict mode is for). Those run
in real transactions (``transaction=True``): the fence's mark is the transaction's, and a
test's own wrapping transaction would carry the newer holder's mark into the older one's.
"""

import contextlib
import threading
import time

import pytest
from django.apps import apps
from django.db import DatabaseError, connection, transaction
from django.db.migrations.state import ProjectState
from django.db.models import F
from django.db.transaction import TransactionManagementError

from locking import FencingToken, InstallFenceGuard, StaleFencingToken, advance_fence, insert_fenced
from locking.epochs import first_token, repair_fence_row
from locking.fence import _fence_statement
from locking.guard import (
    STRICT,
    guarded_tables,
    strict_sql,
    strict_tables,
    unfenced_writes,
    unstrict_sql,
)
from locking.models import FenceEpoch
from locking.tests.testapp.models import Box, FencedThing

RESOURCE = "fenced-thing:strict"
TABLE = FencedThing._meta.db_table
REFUSED = "in a transaction that has not fenced it"
WAIT = 10  # seconds: upper bound for every wait in this module


def grant(token: int, owner: str) -> FencingToken:
    return FencingToken(RESOURCE, token, owner)


OLD, NEW = grant(1, "old holder"), grant(2, "new holder")


def _set_strict(on: bool) -> None:
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for statement in strict_sql(TABLE, "id", quote) if on else unstrict_sql(TABLE, quote):
            cursor.execute(statement)


@pytest.fixture
def strict(db):
    _set_strict(True)
    yield
    _set_strict(False)  # committed, in a transaction=True test: the table is plain again


@pytest.fixture
def thing(db):
    box = Box.objects.create(label="strict")
    return FencedThing.objects.create(name="new", box=box)


def row(thing) -> FencedThing.objects:
    return FencedThing.objects.filter(pk=thing.pk)


def name_of(thing) -> str:
    return row(thing).values_list("name", flat=True).get()


def the_old_holder_then_the_new_one(thing) -> None:
    """The old holder fenced and wrote once; its lease ran out and the new holder fenced
    and wrote: both committed."""
    with transaction.atomic():
        advance_fence(row(thing), OLD)
        row(thing).update(name="old holder's")
    with transaction.atomic():
        advance_fence(row(thing), NEW)
        row(thing).update(name="new holder's")


# --- the adopter's three unfenced writes ----------------------------------------------------


def stale_plain_update(thing) -> None:
    """(a) The stale holder writes with a plain ``update()``, no fence."""
    row(thing).update(name="stale")


def save_after_a_swallowed_stale(thing) -> None:
    """(b) The fence refuses it, the caller swallows ``StaleFencingToken``, and saves."""
    with transaction.atomic():
        with contextlib.suppress(StaleFencingToken):  # the adopter's mistake
            advance_fence(row(thing), OLD)
        instance = FencedThing.objects.get(pk=thing.pk)
        instance.name = "stale"
        instance.save()


def fence_in_one_atomic_write_in_the_next(thing) -> None:
    """(c) The fence passed in its own ``atomic()``, before the new holder's; the write
    comes in the next one, after the new holder committed."""
    with transaction.atomic():
        instance = FencedThing.objects.get(pk=thing.pk)
        instance.name = "stale"
        instance.save(update_fields=["name"])


UNFENCED_WRITES = [
    stale_plain_update,
    save_after_a_swallowed_stale,
    fence_in_one_atomic_write_in_the_next,
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("write", UNFENCED_WRITES, ids=lambda write: write.__name__)
def test_the_strict_guard_refuses_the_unfenced_writes_that_overwrote_a_newer_holder(
    strict, thing, write
):
    the_old_holder_then_the_new_one(thing)
    with pytest.raises(DatabaseError, match=REFUSED):
        write(thing)
    assert name_of(thing) == "new holder's"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("write", UNFENCED_WRITES, ids=lambda write: write.__name__)
def test_without_strict_mode_each_unfenced_write_overwrites_the_newer_holder(thing, write):
    """What strict mode is for: the plain guard lets each of them through."""
    assert TABLE not in strict_tables(connection, [TABLE])
    the_old_holder_then_the_new_one(thing)
    write(thing)
    assert name_of(thing) == "stale"


# --- what the strict guard accepts ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_fenced_transaction_updates_saves_and_deletes_its_row(strict, thing):
    with transaction.atomic():
        advance_fence(row(thing), OLD)
        row(thing).update(name="updated")
        instance = FencedThing.objects.get(pk=thing.pk)
        instance.name = "saved"
        instance.save()
    assert FencedThing.objects.get(pk=thing.pk).last_fence_token == OLD.token
    with transaction.atomic():
        advance_fence(row(thing), NEW)
        FencedThing.objects.get(pk=thing.pk).delete()
    assert not row(thing).exists()


@pytest.mark.django_db(transaction=True)
def test_a_queryset_fence_and_the_same_grant_fencing_again_both_count(strict, thing):
    """The fence by subquery (a queryset that is not a plain pk filter) marks its row as the
    plain one does; the same grant fences again in a later transaction (mark started, call
    out, mark done) and may write there too."""
    for step in ("started", "done"):
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk, box__label="strict"), OLD)
            row(thing).update(name=step)
    assert name_of(thing) == "done"


@pytest.mark.django_db(transaction=True)
def test_a_row_insert_fenced_inserted_may_be_written_in_its_transaction(strict, thing):
    with transaction.atomic():
        created = FencedThing(name="created")
        assert insert_fenced(created, OLD)
        row(created).update(name="and written")
    assert name_of(created) == "and written"


@pytest.mark.django_db(transaction=True)
def test_a_statement_that_fences_and_writes_the_row_at_once_is_accepted(strict, thing):
    """A statement that sets the fence column with the fence's own expression (``set_fence``)
    is the fence's: the row is written by the same statement that fences it."""
    statement = _fence_statement(FencedThing, connection.alias)
    table, pk = connection.ops.quote_name(TABLE), connection.ops.quote_name("id")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {statement.set_fence}, name = %s WHERE {pk} = %s",  # noqa: S608
            [5, "fused", thing.pk],
        )
        assert cursor.rowcount == 1
        row(thing).update(name="then written again")  # and the row counts as fenced after
    assert name_of(thing) == "then written again"


# --- what it refuses ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_raising_the_fence_column_by_hand_is_not_a_fence(strict, thing):
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        row(thing).update(last_fence_token=F("last_fence_token") + 1, name="by hand")
    assert (name_of(thing), row(thing).get().last_fence_token) == ("new", 0)


@pytest.mark.django_db(transaction=True)
def test_a_fence_a_rolled_back_savepoint_took_back_no_longer_counts(strict, thing):
    """PostgreSQL takes a transaction-local setting back with the savepoint that set it:
    strict mode refuses the write on its own, before the undone-fence trigger."""
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        try:
            with transaction.atomic():
                advance_fence(row(thing), OLD)
                raise RuntimeError("refused after the fence")
        except RuntimeError:
            pass
        row(thing).update(name="unfenced")
    assert name_of(thing) == "new"


@pytest.mark.django_db(transaction=True)
def test_a_fence_kept_by_a_released_savepoint_counts(strict, thing):
    with transaction.atomic():
        with transaction.atomic():
            advance_fence(row(thing), OLD)
        row(thing).update(name="after the savepoint")
    assert name_of(thing) == "after the savepoint"


@pytest.mark.django_db(transaction=True)
def test_fencing_another_row_does_not_let_a_transaction_write_this_one(strict, thing):
    other = FencedThing.objects.create(name="other", box=thing.box)
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        advance_fence(row(other), OLD)
        row(other).update(name="fenced: fine")
        row(thing).update(name="not fenced")
    assert (name_of(thing), name_of(other)) == ("new", "other")


@pytest.mark.django_db(transaction=True)
def test_an_unfenced_delete_is_refused(strict, thing):
    with pytest.raises(DatabaseError, match=rf"DELETE of {TABLE}:{thing.pk} {REFUSED}"):
        row(thing).delete()
    assert row(thing).exists()


@pytest.mark.django_db(transaction=True)
def test_the_refusal_says_what_was_written_and_what_to_do(strict, thing):
    with pytest.raises(DatabaseError) as refused:
        row(thing).update(name="unfenced")
    diag = refused.value.__cause__.diag
    assert diag.message_primary == (
        f"locking: UPDATE of {TABLE}:{thing.pk} in a transaction that has not fenced it "
        "(strict fence guard)"
    )
    assert "transaction.atomic() block that called advance_fence()" in diag.message_hint
    assert "StaleFencingToken" in diag.message_hint and "unfenced_writes()" in diag.message_hint


@pytest.mark.django_db(transaction=True)
def test_a_fence_that_loses_its_row_while_waiting_for_it_leaves_no_mark_behind(strict, thing):
    """The fence statement marks the row its WHERE let through, then waits for the row's
    lock; the row's holder (another resource's fence) commits a higher token, and the fence
    fences nothing. Its mark goes with the refusal: the write that swallows it is refused."""
    waiting, done = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def adopter():
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    seen["pid"] = cursor.fetchone()[0]
                waiting.set()
                try:
                    advance_fence(row(thing), OLD)
                except StaleFencingToken as stale:
                    seen["stale"] = stale
                row(thing).update(name="stale")
        except DatabaseError as exc:
            seen["refused"] = exc
        finally:
            connection.close()
            waiting.set()
            done.set()

    with transaction.atomic():
        advance_fence(row(thing), FencingToken("fenced-thing:another-name", 10, "other"))
        worker = threading.Thread(target=adopter)
        worker.start()
        assert waiting.wait(WAIT)
        wait_until_blocked(seen["pid"])
    assert done.wait(WAIT)
    worker.join(WAIT)
    assert isinstance(seen.get("stale"), StaleFencingToken)
    assert REFUSED in str(seen.get("refused"))
    assert name_of(thing) == "new"


def wait_until_blocked(backend_pid: int) -> None:
    """Return once ``backend_pid`` waits for a lock (pg_stat_activity), else fail."""
    deadline = time.monotonic() + WAIT
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [backend_pid]
            )
            found = cursor.fetchone()
            if found is not None and found[0] == "Lock":
                return
            time.sleep(0.01)
    pytest.fail(f"backend {backend_pid} never waited on the row lock")


# --- the way out, the operation, the checks -------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_unfenced_writes_lets_one_block_write_and_no_more(strict, thing):
    with pytest.raises(TransactionManagementError), unfenced_writes():
        pass
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        with unfenced_writes():
            row(thing).update(name="on purpose")
        assert name_of(thing) == "on purpose"
        row(thing).update(name="after the block")
    with transaction.atomic(), unfenced_writes():
        row(thing).delete()
    assert not row(thing).exists()


@pytest.mark.django_db(transaction=True)
def test_repairing_a_row_beyond_its_record_is_locking_own_fenced_write(strict, thing):
    beyond = first_token(5)
    with transaction.atomic(), unfenced_writes():
        row(thing).update(last_fence_token=beyond)
    repaired = repair_fence_row(
        FencedThing, thing.pk, resource=RESOURCE, token=beyond, by="ops", reason="test"
    )
    assert row(thing).get().last_fence_token == repaired.now < beyond
    FenceEpoch.objects.filter(resource=RESOURCE).delete()


def test_the_operation_deconstructs_with_the_flag_and_names_its_migration():
    plain, strict_guard = (
        InstallFenceGuard("fencedthing"),
        InstallFenceGuard("fencedthing", strict=True),
    )
    assert plain.deconstruct() == ("InstallFenceGuard", ["fencedthing"], {})
    assert strict_guard.deconstruct() == ("InstallFenceGuard", ["fencedthing"], {"strict": True})
    assert strict_guard.migration_name_fragment == "strict_fence_guard_fencedthing"
    assert "strict fence guard" in strict_guard.describe()


@pytest.mark.django_db(transaction=True)
def test_the_strict_operation_applies_and_unapplies_and_the_guard_stays(thing):
    state = ProjectState.from_apps(apps)
    operation = InstallFenceGuard("fencedthing", strict=True)
    try:
        with connection.schema_editor() as editor:
            operation.database_forwards("locking_testapp", editor, state, state)
        assert TABLE in strict_tables(connection, [TABLE])
        assert TABLE in guarded_tables(connection, [TABLE])  # E014 still sees the guard
        with pytest.raises(DatabaseError, match=REFUSED):
            stale_plain_update(thing)
        with connection.schema_editor() as editor:
            operation.database_backwards("locking_testapp", editor, state, state)
        assert TABLE not in strict_tables(connection, [TABLE])
        assert TABLE in guarded_tables(connection, [TABLE])
        stale_plain_update(thing)
        assert name_of(thing) == "stale"
    finally:
        _set_strict(False)


@pytest.mark.django_db(transaction=True)
def test_the_plain_operation_makes_a_strict_guard_plain_again(strict, thing):
    state = ProjectState.from_apps(apps)
    with connection.schema_editor() as editor:
        InstallFenceGuard("fencedthing").database_forwards("locking_testapp", editor, state, state)
    assert TABLE not in strict_tables(connection, [TABLE])
    assert TABLE in guarded_tables(connection, [TABLE])


def test_the_strict_trigger_is_named_apart_from_the_guard_the_checks_require():
    from locking.guard import TRIGGERS

    assert STRICT not in TRIGGERS


@pytest.mark.django_db(transaction=True)
def test_e014_names_a_table_whose_migrations_made_it_strict_but_that_is_not(monkeypatch):
    from locking import fenced_checks
    from locking.checks import fenced_tables_carry_the_guard

    made_strict = {("locking_testapp", "fencedthing"): ("locking_testapp", "0002_fence_guard")}
    monkeypatch.setattr(fenced_checks, "_strict_migrations", lambda applied: made_strict)
    [error] = fenced_tables_carry_the_guard(databases=["default"])
    assert error.id == "locking.E014"
    assert f"The fence guard on table {TABLE} is not strict" in error.msg
    assert "migrate locking_testapp 0001_initial --skip-checks" in error.hint
    _set_strict(True)
    try:
        assert fenced_tables_carry_the_guard(databases=["default"]) == []
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER {STRICT}")
        [error] = fenced_tables_carry_the_guard(databases=["default"])
        assert "not enabled" in error.msg and STRICT in error.msg
    finally:
        _set_strict(False)
