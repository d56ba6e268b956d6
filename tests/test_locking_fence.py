"""The fence check: ``advance_fence`` in the writing transaction, and counter-loss recovery.

The concurrency tests use two real PostgreSQL connections (one per thread) and force the
interleaving they claim: the first transaction holds the row lock at an ``Event`` until the
test has seen the second one wait on it in ``pg_stat_activity``.
"""

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from hoa.models import Complaint
from locking import FenceLock, StaleFencingToken, advance_fence
from locking.epochs import first_token
from locking.models import FenceEpoch
from tests.harness.waiting import wait_until

RESOURCE = "vendor-assignment:complaint:fence-test"
WAIT = 10  # seconds: upper bound for every wait in this module


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Leaking roof")


def token_of(complaint: Complaint) -> int:
    return Complaint.objects.values_list("last_fence_token", flat=True).get(pk=complaint.pk)


# --- unit behaviour ---------------------------------------------------------------------


@pytest.mark.django_db
def test_advance_fence_records_a_newer_token(complaint):
    with transaction.atomic():
        advance_fence(Complaint.objects.filter(pk=complaint.pk), 7)
    assert token_of(complaint) == 7


@pytest.mark.django_db
def test_advance_fence_rejects_an_older_or_equal_token_and_names_the_recorded_one(complaint):
    Complaint.objects.filter(pk=complaint.pk).update(last_fence_token=7)
    for token in (6, 7):
        with pytest.raises(StaleFencingToken) as caught, transaction.atomic():
            advance_fence(Complaint.objects.filter(pk=complaint.pk), token)
        assert (caught.value.token, caught.value.recorded) == (token, 7)
    assert token_of(complaint) == 7


@pytest.mark.django_db
def test_stale_token_rolls_back_every_write_of_its_transaction(complaint, maple):
    Complaint.objects.filter(pk=complaint.pk).update(last_fence_token=7)
    with pytest.raises(StaleFencingToken), transaction.atomic():
        Complaint.objects.create(organization=maple, title="written before the fence")
        advance_fence(Complaint.objects.filter(pk=complaint.pk), 3)
    assert not Complaint.objects.filter(title="written before the fence").exists()


@pytest.mark.django_db(transaction=True)  # a plain django_db test runs inside atomic()
def test_advance_fence_outside_atomic_raises_and_writes_nothing(complaint):
    with pytest.raises(TransactionManagementError, match=r"inside transaction\.atomic"):
        advance_fence(Complaint.objects.filter(pk=complaint.pk), 5)
    assert token_of(complaint) == 0


@pytest.mark.django_db
def test_advance_fence_on_no_row_raises_does_not_exist(complaint):
    with pytest.raises(Complaint.DoesNotExist), transaction.atomic():
        advance_fence(Complaint.objects.filter(pk=complaint.pk + 1000), 5)


@pytest.mark.django_db
def test_advance_fence_on_several_rows_raises_and_rolls_back(complaint, maple):
    other = Complaint.objects.create(organization=maple, title="Broken gate")
    with pytest.raises(ValueError, match="one row; it matched 2"), transaction.atomic():
        advance_fence(Complaint.objects.filter(organization=maple), 5)
    assert token_of(complaint) == 0
    assert token_of(other) == 0


@pytest.mark.django_db
def test_advance_fence_works_with_a_queryset_that_joins_other_tables(complaint):
    joined = Complaint.objects.filter(pk=complaint.pk, organization__slug="maple-court")
    with transaction.atomic():
        advance_fence(joined, 4)
    with pytest.raises(StaleFencingToken), transaction.atomic():
        advance_fence(joined, 3)
    assert token_of(complaint) == 4


# --- concurrency: two connections, one row ----------------------------------------------


def by_pk(pk: int):
    return Complaint.objects.filter(pk=pk)


def by_pk_and_organization(pk: int):
    # A filter across a relation makes Django's UPDATE use "WHERE id IN (SELECT …)".
    return Complaint.objects.filter(pk=pk, organization__slug="maple-court")


def wait_until_blocked_on_row_lock(backend_pid: int) -> None:
    """Return once ``backend_pid`` waits for a lock (pg_stat_activity), else fail."""

    def waiting() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [backend_pid]
            )
            row = cursor.fetchone()
        return row is not None and row[0] == "Lock"

    wait_until(waiting, what=f"backend {backend_pid} to wait on the row lock", timeout=WAIT)


class FencedWriter(threading.Thread):
    """One holder: in its own connection, advance the fence, write a title, maybe hold."""

    def __init__(self, *, pk, token, title, queryset, barrier, hold=None, after=None):
        super().__init__(name=f"writer-{title}")
        self.pk, self.token, self.title, self.queryset = pk, token, title, queryset
        self.barrier, self.hold, self.after = barrier, hold, after
        self.fenced = threading.Event()  # set once advance_fence returned in the transaction
        self.backend_pid: int | None = None
        self.pid_known = threading.Event()
        self.error: BaseException | None = None

    def run(self):
        try:
            self.barrier.wait(WAIT)
            if self.after is not None:
                assert self.after.wait(WAIT), "the other writer never took the row lock"
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    self.backend_pid = cursor.fetchone()[0]
                self.pid_known.set()
                advance_fence(self.queryset(self.pk), self.token)
                Complaint.objects.filter(pk=self.pk).update(title=self.title)
                self.fenced.set()
                if self.hold is not None:
                    assert self.hold.wait(WAIT), "the test never let the transaction commit"
        except BaseException as exc:
            self.error = exc
        finally:
            self.pid_known.set()
            connection.close()


def two_grants() -> tuple[int, int]:
    """Grant twice on one resource with a real takeover: return (older, newer) tokens."""
    lock = FenceLock()
    older = lock.acquire(RESOURCE, ttl=timedelta(seconds=30))
    lock.client.pexpire(f"lock:{{{RESOURCE}}}", 0)  # the older lease expires
    newer = lock.acquire(RESOURCE, ttl=timedelta(seconds=30))
    assert newer.token > older.token
    newer.release()
    return older.token, newer.token


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queryset", [by_pk, by_pk_and_organization])
def test_older_holder_blocked_behind_newer_commit_gets_stale_and_writes_nothing(
    complaint, queryset: Callable
):
    older_token, newer_token = two_grants()
    barrier = threading.Barrier(2)
    release_newer = threading.Event()
    newer = FencedWriter(
        pk=complaint.pk,
        token=newer_token,
        title="newer",
        queryset=queryset,
        barrier=barrier,
        hold=release_newer,
    )
    older = FencedWriter(
        pk=complaint.pk,
        token=older_token,
        title="older",
        queryset=queryset,
        barrier=barrier,
        after=newer.fenced,
    )
    newer.start()
    older.start()
    try:
        assert older.pid_known.wait(WAIT)
        assert older.backend_pid is not None, older.error
        wait_until_blocked_on_row_lock(older.backend_pid)
        assert not older.fenced.is_set()
    finally:
        release_newer.set()
        newer.join(WAIT)
        older.join(WAIT)

    assert newer.error is None
    assert isinstance(older.error, StaleFencingToken)
    assert (older.error.token, older.error.recorded) == (older_token, newer_token)
    complaint.refresh_from_db()
    assert (complaint.last_fence_token, complaint.title) == (newer_token, "newer")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queryset", [by_pk, by_pk_and_organization])
def test_newer_holder_blocked_behind_older_commit_still_succeeds(complaint, queryset: Callable):
    older_token, newer_token = two_grants()
    barrier = threading.Barrier(2)
    release_older = threading.Event()
    older = FencedWriter(
        pk=complaint.pk,
        token=older_token,
        title="older",
        queryset=queryset,
        barrier=barrier,
        hold=release_older,
    )
    newer = FencedWriter(
        pk=complaint.pk,
        token=newer_token,
        title="newer",
        queryset=queryset,
        barrier=barrier,
        after=older.fenced,
    )
    older.start()
    newer.start()
    try:
        assert newer.pid_known.wait(WAIT)
        assert newer.backend_pid is not None, newer.error
        wait_until_blocked_on_row_lock(newer.backend_pid)
        assert not newer.fenced.is_set()
    finally:
        release_older.set()
        older.join(WAIT)
        newer.join(WAIT)

    assert older.error is None
    assert newer.error is None
    complaint.refresh_from_db()
    assert (complaint.last_fence_token, complaint.title) == (newer_token, "newer")


# --- epochs ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_token_of_an_epoch_older_than_the_recorded_one_is_refused_even_above_the_row(complaint):
    """A process that paused between recording an epoch and seeding Redis with it can seed
    a counter below an epoch others have used since: its tokens must lose on the epoch."""
    FenceEpoch.objects.create(resource=RESOURCE, epoch=3, started_at=timezone.now())
    stale = first_token(2) + 9  # epoch 2: above the row's token 0, below the epoch

    with pytest.raises(StaleFencingToken) as caught, transaction.atomic():
        advance_fence(Complaint.objects.filter(pk=complaint.pk), stale, resource=RESOURCE)

    assert (caught.value.token, caught.value.recorded, caught.value.epoch) == (stale, 0, 3)
    assert "before epoch 3 began" in str(caught.value)
    with transaction.atomic():
        advance_fence(
            Complaint.objects.filter(pk=complaint.pk), first_token(3) + 1, resource=RESOURCE
        )
    assert token_of(complaint) == first_token(3) + 1


@pytest.mark.django_db
def test_a_bare_token_without_a_resource_is_checked_against_the_row_only(complaint):
    FenceEpoch.objects.create(resource=RESOURCE, epoch=3, started_at=timezone.now())
    with transaction.atomic():
        advance_fence(Complaint.objects.filter(pk=complaint.pk), first_token(2) + 9)
    assert token_of(complaint) == first_token(2) + 9
