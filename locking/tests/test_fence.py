"""The fence check: ``advance_fence`` in the writing transaction, and counter-loss recovery.

The concurrency tests use two real PostgreSQL connections (one per thread) and force the
interleaving they claim: the first transaction holds the row lock at an ``Event`` until the
test has seen the second one wait on it in ``pg_stat_activity``.
"""

import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from locking import FenceLock, FencingToken, StaleFencingToken, advance_fence, insert_fenced
from locking.epochs import first_token
from locking.models import FenceEpoch
from locking.tests.support import INSTALLED, SOURCE_ROOT
from locking.tests.testapp.models import Box, FencedThing

RESOURCE = "fenced-thing:fence-test"
WAIT = 10  # seconds: upper bound for every wait in this module


@pytest.fixture
def box(db):
    return Box.objects.create(label="north")


@pytest.fixture
def thing(box):
    return FencedThing.objects.create(name="Leaking roof", box=box)


def token_of(thing: FencedThing) -> int:
    return FencedThing.objects.values_list("last_fence_token", flat=True).get(pk=thing.pk)


# --- unit behaviour ---------------------------------------------------------------------


def grant(token: int, owner: str = "grant-a") -> FencingToken:
    """A grant's fencing token on RESOURCE, as a lease would give it (``owner``: which
    grant; two grants never share one)."""
    return FencingToken(RESOURCE, token, owner)


@pytest.mark.django_db
def test_advance_fence_records_a_newer_token(thing):
    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(7))
    assert token_of(thing) == 7


@pytest.mark.django_db
@pytest.mark.parametrize("bare", [7, True, "7", 7.0], ids=["int", "bool", "str", "float"])
def test_a_bare_token_is_refused_with_a_type_error_that_says_what_to_pass(thing, bare):
    """Issue 35, point 1: a bare int skipped the epoch check (it carries no resource)."""
    for entry, call in (
        ("advance_fence", lambda: advance_fence(FencedThing.objects.filter(pk=thing.pk), bare)),
        ("insert_fenced", lambda: insert_fenced(FencedThing(name="New"), bare)),
    ):
        with (
            pytest.raises(TypeError, match=rf"{entry}\(\) takes the lease") as caught,
            transaction.atomic(),
        ):
            call()
        assert "not `lease.token`" in str(caught.value)
    assert token_of(thing) == 0
    assert not FencedThing.objects.filter(name="New").exists()


@pytest.mark.django_db
def test_an_older_token_and_the_same_number_from_another_grant_are_refused(thing):
    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(7))
    for token in (grant(6, "grant-b"), grant(7, "grant-c")):  # older; handed out twice
        with pytest.raises(StaleFencingToken) as caught, transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), token)
        assert (caught.value.token, caught.value.recorded) == (token.token, 7)
    assert token_of(thing) == 7


@pytest.mark.django_db
def test_one_grant_fences_its_row_again_in_a_later_transaction(thing):
    """Issue 35, point 5: mark started, call out, mark done, each in its own transaction.
    The second fence of the same grant passes (an equal token from another grant does not:
    the test above)."""
    for step in ("started", "done"):
        with transaction.atomic():
            advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(7))
            FencedThing.objects.filter(pk=thing.pk).update(name=step)
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("done", 7)


@pytest.mark.django_db
def test_a_row_fenced_under_another_resource_is_refused_naming_the_row_and_that_resource(thing):
    """Issue 45, item 6: fencing a row under a second resource name said "the resource
    already recorded token 2", although that resource had recorded nothing: the row had,
    under the first name."""
    first, second = "fenced-thing:first-name", "fenced-thing:second-name"
    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), FencingToken(first, 2, "a"))
    with pytest.raises(StaleFencingToken) as caught, transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), FencingToken(second, 1, "b"))
    refused = caught.value
    assert (refused.token, refused.recorded, refused.resource) == (1, 2, second)
    assert refused.row == f"locking_testapp.FencedThing pk {thing.pk}"
    assert refused.row_resources == (first,)
    assert str(refused) == (
        f"fencing token 1 of {second!r} is stale: locking_testapp.FencedThing pk {thing.pk} "
        f"already records token 2, which {second!r} never recorded (recorded by {first!r}). "
        "One row, one resource name: fence the row under the resource it was fenced under."
    )
    assert "the resource already recorded" not in str(refused)
    assert token_of(thing) == 2


@pytest.mark.django_db
def test_the_row_never_takes_a_token_below_its_own(thing):
    """The row's own check stays a second line: a row fenced higher by any path refuses a
    lower token, whatever the resource's record says."""
    FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=9)
    with pytest.raises(StaleFencingToken) as caught, transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(8))
    assert (caught.value.token, caught.value.recorded) == (8, 9)
    assert "which no resource's record holds: written by hand" in str(caught.value)
    assert not FenceEpoch.objects.filter(resource=RESOURCE, token=8).exists()


@pytest.mark.django_db
def test_stale_token_rolls_back_every_write_of_its_transaction(thing):
    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(7))
    with pytest.raises(StaleFencingToken), transaction.atomic():
        FencedThing.objects.create(name="written before the fence")
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(3, "grant-b"))
    assert not FencedThing.objects.filter(name="written before the fence").exists()


@pytest.mark.django_db(transaction=True)  # a plain django_db test runs inside atomic()
def test_advance_fence_outside_atomic_raises_and_writes_nothing(thing):
    with pytest.raises(TransactionManagementError, match=r"inside transaction\.atomic"):
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(5))
    assert token_of(thing) == 0


@pytest.mark.django_db
def test_advance_fence_on_no_row_raises_does_not_exist(thing):
    with pytest.raises(FencedThing.DoesNotExist), transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk + 1000), grant(5))


@pytest.mark.django_db
def test_advance_fence_on_several_rows_raises_and_rolls_back(thing, box):
    other = FencedThing.objects.create(name="Broken gate", box=box)
    with pytest.raises(ValueError, match="one row; it matched 2"), transaction.atomic():
        advance_fence(FencedThing.objects.filter(box=box), grant(5))
    assert token_of(thing) == 0
    assert token_of(other) == 0


@pytest.mark.django_db
def test_a_queryset_of_two_rows_one_fenced_by_a_newer_holder_is_refused(thing, box):
    """Issue 35, point 3: the older holder updated only its own row (the newer one's was
    above its token), took "1 row updated" for success and went on to overwrite it."""
    newer_row = FencedThing.objects.create(name="Broken gate", box=box)
    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=newer_row.pk), grant(9, "newer"))
        FencedThing.objects.filter(pk=newer_row.pk).update(name="newer's")
    both = FencedThing.objects.filter(box=box)

    with pytest.raises(ValueError, match="one row; it matched 2"), transaction.atomic():
        advance_fence(both, grant(5, "older"))
        both.update(name="older's")

    assert sorted(both.values_list("name", "last_fence_token")) == [
        ("Leaking roof", 0),
        ("newer's", 9),
    ]


@pytest.mark.django_db
def test_advance_fence_works_with_a_queryset_that_joins_other_tables(thing):
    joined = FencedThing.objects.filter(pk=thing.pk, box__label="north")
    with transaction.atomic():
        advance_fence(joined, grant(4))
    with pytest.raises(StaleFencingToken), transaction.atomic():
        advance_fence(joined, grant(3, "grant-b"))
    assert token_of(thing) == 4


@pytest.mark.django_db
def test_a_plain_pk_filter_is_fenced_by_one_statement_comparing_on_the_rows_themselves(thing):
    table = connection.ops.quote_name(FencedThing._meta.db_table)
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(7))
    [fence] = [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert 'ON CONFLICT ("resource") DO UPDATE' in fence
    assert f'WHERE {table}."id" = {thing.pk} AND {table}."last_fence_token" <= 7' in fence
    assert "AND EXISTS (SELECT 1 FROM claim)" in fence
    assert "IN (SELECT" not in fence
    assert token_of(thing) == 7


@pytest.mark.django_db
def test_any_other_queryset_picks_and_counts_its_row_in_the_same_statement(thing, box):
    table = connection.ops.quote_name(FencedThing._meta.db_table)
    other = FencedThing.objects.create(name="Broken gate", box=box)
    # Ordered and sliced: the subquery keeps its ORDER BY, which decides the row it takes.
    first_by_name = FencedThing.objects.filter(box=box).order_by("name")[:1]
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        advance_fence(first_by_name, grant(3))
    [fence] = [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert ", picked AS (SELECT" in fence
    assert f'WHERE {table}."id" IN (SELECT * FROM picked)' in fence  # noqa: S608 - a test
    assert "AND (SELECT count(*) FROM picked) = 1" in fence
    assert (token_of(other), token_of(thing)) == (3, 0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "empty",
    [FencedThing.objects.none, lambda: FencedThing.objects.filter(pk=2**70)],
    ids=["none", "pk-out-of-range"],
)
def test_advance_fence_on_a_queryset_that_cannot_match_raises_does_not_exist(thing, empty):
    with pytest.raises(FencedThing.DoesNotExist), transaction.atomic():
        advance_fence(empty(), grant(5))
    assert token_of(thing) == 0


# --- concurrency: two connections, one row ----------------------------------------------


def by_pk(pk: int):
    return FencedThing.objects.filter(pk=pk)


def by_pk_and_box(pk: int):
    # A filter across a relation makes Django's UPDATE use "WHERE id IN (SELECT …)".
    return FencedThing.objects.filter(pk=pk, box__label="north")


def wait_until_blocked_on_row_lock(backend_pid: int) -> None:
    """Return once ``backend_pid`` waits for a lock (pg_stat_activity), else fail."""
    deadline = time.monotonic() + WAIT
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [backend_pid]
            )
            row = cursor.fetchone()
            if row is not None and row[0] == "Lock":
                return
            time.sleep(0.01)
    pytest.fail(f"backend {backend_pid} never waited on the row lock")


class Holder(threading.Thread):
    """One holder in its own connection: once the barrier opens (and, given ``after``, once
    the other holder's write returned), it opens a transaction, writes (``write``), sets
    ``passed`` and keeps the transaction open until ``hold`` is set."""

    def __init__(self, *, token, name, barrier, hold=None, after=None):
        super().__init__(name=f"holder-{name}")
        self.token, self.new_name, self.barrier = token, name, barrier
        self.hold, self.after = hold, after
        self.passed = threading.Event()  # set once its write returned in the transaction
        self.backend_pid: int | None = None
        self.pid_known = threading.Event()
        self.error: BaseException | None = None

    def write(self) -> None:
        raise NotImplementedError

    def run(self):
        try:
            self.barrier.wait(WAIT)
            if self.after is not None:
                assert self.after.wait(WAIT), "the other holder's write never returned"
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    self.backend_pid = cursor.fetchone()[0]
                self.pid_known.set()
                self.write()
                self.passed.set()
                if self.hold is not None:
                    assert self.hold.wait(WAIT), "the test never let the transaction commit"
        except BaseException as exc:
            self.error = exc
        finally:
            self.pid_known.set()
            connection.close()


class FencedWriter(Holder):
    """Advances the fence on the row (``queryset(pk)``) and writes its name."""

    def __init__(self, *, pk, queryset, **holder):
        super().__init__(**holder)
        self.pk, self.queryset = pk, queryset

    def write(self) -> None:
        advance_fence(self.queryset(self.pk), self.token)
        FencedThing.objects.filter(pk=self.pk).update(name=self.new_name)


def two_grants() -> tuple[FencingToken, FencingToken]:
    """Grant twice on one resource with a real takeover: return (older, newer)."""
    lock = FenceLock()
    older = lock.acquire(RESOURCE, ttl=timedelta(seconds=30))
    lock.client.pexpire(f"lock:{{{RESOURCE}}}", 0)  # the older lease expires
    newer = lock.acquire(RESOURCE, ttl=timedelta(seconds=30))
    assert newer.token > older.token
    newer.release()
    return older.fencing_token, newer.fencing_token


def race_behind(thing, queryset: Callable, *, first: tuple[int, str], then: tuple[int, str]):
    """``first`` advances the fence and holds its transaction open; ``then`` is started and
    provably waits on the row lock; ``first`` commits; return both writers, finished."""
    barrier = threading.Barrier(2)
    release_first = threading.Event()
    holder = FencedWriter(
        pk=thing.pk,
        token=first[0],
        name=first[1],
        queryset=queryset,
        barrier=barrier,
        hold=release_first,
    )
    waiter = FencedWriter(
        pk=thing.pk,
        token=then[0],
        name=then[1],
        queryset=queryset,
        barrier=barrier,
        after=holder.passed,
    )
    return run_blocked(holder, waiter, release_first, waiter_passed=waiter.passed)


def run_blocked(holder, waiter, release_first: threading.Event, *, waiter_passed):
    """Start both; once ``waiter`` provably waits on ``holder``'s lock (and has not passed
    it), let ``holder`` commit; return both, finished."""
    holder.start()
    waiter.start()
    try:
        assert waiter.pid_known.wait(WAIT)
        assert waiter.backend_pid is not None, waiter.error
        wait_until_blocked_on_row_lock(waiter.backend_pid)
        assert not waiter_passed.is_set()
    finally:
        release_first.set()
        holder.join(WAIT)
        waiter.join(WAIT)
    return holder, waiter


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queryset", [by_pk, by_pk_and_box])
def test_older_holder_blocked_behind_newer_commit_gets_stale_and_writes_nothing(
    thing, queryset: Callable
):
    older_token, newer_token = two_grants()
    newer, older = race_behind(
        thing, queryset, first=(newer_token, "newer"), then=(older_token, "older")
    )

    assert newer.error is None
    assert isinstance(older.error, StaleFencingToken)
    assert (older.error.token, older.error.recorded) == (older_token.token, newer_token.token)
    thing.refresh_from_db()
    assert (thing.last_fence_token, thing.name) == (newer_token.token, "newer")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queryset", [by_pk, by_pk_and_box])
def test_newer_holder_blocked_behind_older_commit_still_succeeds(thing, queryset: Callable):
    older_token, newer_token = two_grants()
    older, newer = race_behind(
        thing, queryset, first=(older_token, "older"), then=(newer_token, "newer")
    )

    assert older.error is None
    assert newer.error is None
    thing.refresh_from_db()
    assert (thing.last_fence_token, thing.name) == (newer_token.token, "newer")


# --- epochs ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_token_of_an_epoch_older_than_the_recorded_one_is_refused_even_above_the_row(thing):
    """A process that paused between recording an epoch and seeding Redis with it can seed
    a counter below an epoch others have used since: its tokens must lose on the epoch."""
    FenceEpoch.objects.create(resource=RESOURCE, epoch=3, started_at=timezone.now())
    stale = grant(first_token(2) + 9)  # epoch 2: above the row's token 0, below the epoch

    with pytest.raises(StaleFencingToken) as caught, transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), stale)

    assert (caught.value.token, caught.value.recorded, caught.value.epoch) == (stale.token, 0, 3)
    assert "before epoch 3 began" in str(caught.value)
    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(first_token(3) + 1))
    assert token_of(thing) == first_token(3) + 1


# --- insert_fenced: a new row, fenced as it is inserted ------------------------------------


@pytest.mark.django_db
def test_insert_fenced_inserts_the_row_with_its_token_on_it(box):
    new = FencedThing(name="Cracked window", box=box)
    with transaction.atomic():
        assert insert_fenced(new, grant(7)) is True
    assert new.pk is not None and not new._state.adding
    assert (token_of(new), FencedThing.objects.get(pk=new.pk).name) == (7, "Cracked window")
    # As if inserted with 0 and fenced at 7: the same number from another grant is stale,
    # the same grant and a newer one go on.
    with pytest.raises(StaleFencingToken), transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=new.pk), grant(7, "grant-b"))
    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=new.pk), grant(7))
        advance_fence(FencedThing.objects.filter(pk=new.pk), grant(8, "grant-b"))


@pytest.mark.django_db
def test_insert_fenced_on_a_key_that_exists_inserts_nothing_and_says_so(thing):
    duplicate = FencedThing(pk=thing.pk, name="Someone else's")
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        assert insert_fenced(duplicate, grant(9)) is False
    [insert] = [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert "ON CONFLICT DO NOTHING" in insert and "WHERE EXISTS (SELECT 1 FROM claim)" in insert
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("Leaking roof", 0)
    assert duplicate._state.adding


@pytest.mark.django_db
def test_insert_fenced_refuses_a_token_of_an_epoch_older_than_the_recorded_one(box):
    FenceEpoch.objects.create(resource=RESOURCE, epoch=3, started_at=timezone.now())
    with pytest.raises(StaleFencingToken) as caught, transaction.atomic():
        insert_fenced(FencedThing(name="Old", box=box), grant(first_token(2) + 9))
    assert caught.value.epoch == 3
    with transaction.atomic():
        assert insert_fenced(FencedThing(name="New", box=box), grant(first_token(3) + 1)) is True
    assert list(FencedThing.objects.values_list("name", flat=True)) == ["New"]


@pytest.mark.django_db
def test_an_older_holder_cannot_re_create_a_row_a_newer_one_deleted(thing):
    """Issue 35, point 7: the resource's record keeps the newest token when the row goes."""
    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(9, "newer"))
        FencedThing.objects.filter(pk=thing.pk).delete()

    again = FencedThing(pk=thing.pk, name="Leaking roof, again")
    with pytest.raises(StaleFencingToken) as caught, transaction.atomic():
        insert_fenced(again, grant(5, "older"))

    assert (caught.value.token, caught.value.recorded) == (5, 9)
    assert not FencedThing.objects.filter(pk=thing.pk).exists()


@pytest.mark.django_db(transaction=True)  # a plain django_db test runs inside atomic()
def test_insert_fenced_outside_atomic_raises_and_inserts_nothing(box):
    with pytest.raises(TransactionManagementError):
        insert_fenced(FencedThing(name="Loose", box=box), grant(5))
    assert not FencedThing.objects.exists()


CREATED_PK = 4242  # both creators insert this row: its primary key is their unique key


class FencedCreator(Holder):
    """Creates the row: ``insert_fenced``, and if the row was there (the other created it)
    ``advance_fence`` on it and writes its name."""

    inserted: bool | None = None

    def write(self) -> None:
        mine = FencedThing(pk=CREATED_PK, name=self.new_name)
        self.inserted = insert_fenced(mine, self.token)
        if not self.inserted:
            row = FencedThing.objects.filter(pk=CREATED_PK)
            advance_fence(row, self.token)
            row.update(name=self.new_name)


def race_to_create(*, first: tuple, then: tuple):
    """``first`` inserts the row and holds its transaction open; ``then`` provably waits on
    it (the resource's record's lock); ``first`` commits; return both creators, finished."""
    barrier = threading.Barrier(2)
    release_first = threading.Event()
    holder = FencedCreator(token=first[0], name=first[1], barrier=barrier, hold=release_first)
    waiter = FencedCreator(token=then[0], name=then[1], barrier=barrier, after=holder.passed)
    return run_blocked(holder, waiter, release_first, waiter_passed=waiter.passed)


@pytest.mark.django_db(transaction=True)
def test_an_older_creator_blocked_behind_a_newer_ones_insert_gets_stale_and_writes_nothing():
    older_token, newer_token = two_grants()
    newer, older = race_to_create(first=(newer_token, "newer"), then=(older_token, "older"))

    assert (newer.error, newer.inserted) == (None, True)
    assert older.inserted is None  # refused at its insert, once the newer one committed
    assert isinstance(older.error, StaleFencingToken)
    assert (older.error.token, older.error.recorded) == (older_token.token, newer_token.token)
    row = FencedThing.objects.get(pk=CREATED_PK)
    assert (row.last_fence_token, row.name) == (newer_token.token, "newer")


@pytest.mark.django_db(transaction=True)
def test_a_newer_creator_blocked_behind_an_older_ones_insert_fences_the_row_and_wins():
    older_token, newer_token = two_grants()
    older, newer = race_to_create(first=(older_token, "older"), then=(newer_token, "newer"))

    assert (older.error, older.inserted) == (None, True)
    assert (newer.error, newer.inserted) == (None, False)
    row = FencedThing.objects.get(pk=CREATED_PK)
    assert (row.last_fence_token, row.name) == (newer_token.token, "newer")


# --- the fence guard: the column never goes down, whatever writes it -----------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "write",
    [
        # Django's build-by-pk idiom: _state.adding is true, save() updates every column.
        lambda thing: FencedThing(pk=thing.pk, name="Rebuilt", box=thing.box).save(),
        lambda thing: FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=0),
        lambda thing: FencedThing.objects.bulk_update(
            [FencedThing(pk=thing.pk, name="Bulk", last_fence_token=1)],
            ["name", "last_fence_token"],
        ),
    ],
    ids=["save-by-pk", "update", "bulk_update"],
)
def test_no_write_moves_the_fence_backwards(thing, write):
    """Issue 35, point 4: Model(pk=…).save() wrote last_fence_token back to 0, and an older
    token then passed. The trigger keeps the higher value; the older token is refused."""
    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(9, "newer"))
    write(thing)
    assert token_of(thing) == 9
    FenceEpoch.objects.filter(resource=RESOURCE).update(token=0, owner="")  # the row alone
    with pytest.raises(StaleFencingToken), transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(5, "older"))


@pytest.mark.django_db
def test_an_update_the_guard_keeps_from_lowering_the_fence_returns_1_as_its_docs_say(thing):
    """Issue 45, item 6: ``update(last_fence_token=0)`` returns 1 and the trigger keeps
    the value, silently. The guard's docstring, the check's docs and the fence's page say
    so, since a rowcount is what an adopter reads."""
    import locking.guard

    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(9))
    assert FencedThing.objects.filter(pk=thing.pk).update(last_fence_token=0) == 1
    assert token_of(thing) == 9
    said = "update(last_fence_token=0)`` returns 1"
    assert said in " ".join((locking.guard.__doc__ or "").split())
    if not INSTALLED:
        for page in ("checks.md", "fence.md"):
            text = " ".join((SOURCE_ROOT / "docs" / "locking" / page).read_text().split())
            assert "update(last_fence_token=0)` still returns 1" in text or (
                "update(last_fence_token=0)` returns 1" in text
            ), page


@pytest.mark.django_db
def test_loaddata_of_an_old_fixture_keeps_the_fence(thing, tmp_path):
    from django.core.management import call_command

    with transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(9))
    fixture = tmp_path / "old.json"
    old = {"name": "From a fixture", "box": None, "last_fence_token": 2}
    fixture.write_text(
        json.dumps([{"model": "locking_testapp.fencedthing", "pk": thing.pk, "fields": old}])
    )
    call_command("loaddata", str(fixture), verbosity=0)
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("From a fixture", 9)


# --- another database, a rolled-back savepoint -------------------------------------------


@pytest.mark.django_db(databases=["default", "second"])
def test_a_fence_on_another_database_than_the_records_is_refused_at_once(settings):
    """Issue 35, point 8: the epoch check read the other alias's (empty) records."""
    thing = FencedThing.objects.using("second").create(name="elsewhere")
    with (
        pytest.raises(ValueError, match=r"is in database 'second'.*LOCK_DATABASE"),
        transaction.atomic(using="second"),
    ):
        advance_fence(FencedThing.objects.using("second").filter(pk=thing.pk), grant(5))
    with (
        pytest.raises(ValueError, match="is in database 'second'"),
        transaction.atomic(using="second"),
    ):
        insert_fenced(_on("second", FencedThing(name="new")), grant(5))
    assert FencedThing.objects.using("second").get(pk=thing.pk).last_fence_token == 0


def _on(alias: str, instance):
    instance._state.db = alias
    return instance


@pytest.mark.django_db
def test_writing_a_row_whose_fence_a_rolled_back_savepoint_undid_fails_before_commit(thing):
    """Issue 35, point 10: the fence in a nested atomic() rolled back, the enclosing
    transaction went on to write the row, unfenced, and committed."""
    from django.db import DatabaseError

    with (
        pytest.raises(DatabaseError, match="undone by a rolled-back savepoint"),
        transaction.atomic(),
    ):
        try:
            with transaction.atomic():
                advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(7))
                raise RuntimeError("a refusal after the fence")
        except RuntimeError:
            pass
        FencedThing.objects.filter(pk=thing.pk).update(name="written unfenced")
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("Leaking roof", 0)


@pytest.mark.django_db(transaction=True)  # the last write is in a transaction of its own
def test_a_savepoint_that_undoes_a_fence_leaves_the_rest_of_the_transaction_alone(thing, box):
    """What the guard must not refuse: the refused step's own rollback, then other rows
    (a batch going on, a page answering)."""
    other = FencedThing.objects.create(name="Broken gate", box=box)
    with transaction.atomic():
        try:
            with transaction.atomic():
                advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(7))
                raise RuntimeError("refused after the fence")
        except RuntimeError:
            pass
        FencedThing.objects.filter(pk=other.pk).update(name="the next one")
        assert FencedThing.objects.get(pk=thing.pk).name == "Leaking roof"  # reads are fine
    other.refresh_from_db()
    assert other.name == "the next one"
    # A later transaction may write the row again: the guard was this transaction's.
    FencedThing.objects.filter(pk=thing.pk).update(name="later")


@pytest.mark.django_db(transaction=True)
def test_the_savepoint_watch_leaves_the_connection_once_its_transaction_is_over(thing):
    """The guard's execute wrapper is a transaction's: the first statement after it (here
    the next request's, in a long-lived process) takes it off, so later statements run
    without it."""
    from django.db import connection

    from locking import guard

    with transaction.atomic(), transaction.atomic():
        advance_fence(FencedThing.objects.filter(pk=thing.pk), grant(7))
        assert guard._guard_rollbacks in connection.execute_wrappers
    FencedThing.objects.filter(pk=thing.pk).exists()
    assert guard._guard_rollbacks not in connection.execute_wrappers
