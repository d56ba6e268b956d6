"""The complaint SLA sweep (hoa.jobs.scheduled.sweep_sla) against real PostgreSQL.

Concurrency is forced, not hoped for: a job that reaches a hold point (a table lock, or an
uncommitted conflicting row) blocks inside its pass while the test acts and watches
``pg_locks`` / ``pg_stat_activity``.
"""

import threading
from concurrent import futures
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import Count
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from hoa.jobs.scheduled import SLA_SWEEP_LOCK, SweepResult, sweep_sla
from hoa.models import Complaint, ComplaintEvent
from tests.harness.waiting import wait_until
from tests.jobs_support import (
    advisory_lock_holders,
    backends_waiting,
    captured_log,
    make_overdue,
    table_locked,
    worker_threads,
)

pytestmark = pytest.mark.django_db(transaction=True)

EVENT_INSERT = 'INSERT INTO "hoa_complaintevent"'


def breach_events_per_complaint() -> dict[int, int]:
    rows = (
        ComplaintEvent.objects.filter(kind=ComplaintEvent.Kind.SLA_BREACHED)
        .values("complaint")
        .annotate(n=Count("id"))
    )
    return {row["complaint"]: row["n"] for row in rows}


def test_due_date_follows_the_organization_policy_and_only_overdue_open_complaints_breach(maple):
    maple.sla_hours_high, maple.sla_hours_low = 2, 100
    maple.save()
    opened = timezone.now() - timedelta(hours=3)
    high = Complaint.objects.create(
        organization=maple, title="Flood", priority="high", opened_at=opened
    )
    low = Complaint.objects.create(
        organization=maple, title="Bins", priority="low", opened_at=opened
    )
    resolved = Complaint.objects.create(
        organization=maple, title="Done", priority="high", opened_at=opened, status="resolved"
    )
    in_progress = Complaint.objects.create(
        organization=maple, title="Doing", priority="high", opened_at=opened, status="in_progress"
    )
    assert high.sla_due_at == opened + timedelta(hours=2)
    assert low.sla_due_at == opened + timedelta(hours=100)

    now = timezone.now()
    result = sweep_sla(now=now)

    assert result == SweepResult(acquired=True, breached=2, batches=1)
    breached = set(Complaint.objects.breached().values_list("pk", flat=True))
    assert breached == {high.pk, in_progress.pk}
    high.refresh_from_db()
    assert high.sla_breached_at == now
    assert not Complaint.objects.get(pk=resolved.pk).is_breached
    assert breach_events_per_complaint() == {high.pk: 1, in_progress.pk: 1}
    event = ComplaintEvent.objects.get(complaint=high)
    assert event.at == now
    assert (event.old_due_at, event.detail) == (high.sla_due_at, "")


def test_a_breached_complaint_is_not_breached_again(maple):
    complaints = make_overdue(maple, 3)
    first_now = timezone.now()
    assert sweep_sla(now=first_now).breached == 3

    again = sweep_sla(now=first_now + timedelta(hours=1))

    assert again == SweepResult(acquired=True, breached=0, batches=0)
    assert set(Complaint.objects.values_list("sla_breached_at", flat=True)) == {first_now}
    assert breach_events_per_complaint() == {c.pk: 1 for c in complaints}


@pytest.mark.parametrize(("batch_size", "batches"), [(500, 5), (700, 4)])
def test_batches_breach_2500_overdue_complaints_exactly_once(maple, oak, batch_size, batches):
    overdue = make_overdue(maple, 2000) + make_overdue(oak, 500)
    now = timezone.now()
    not_yet_due = Complaint.objects.create(
        organization=maple, title="Fresh", sla_due_at=now + timedelta(minutes=1)
    )

    result = sweep_sla(now=now, batch_size=batch_size)

    assert result == SweepResult(acquired=True, breached=2500, batches=batches)
    assert breach_events_per_complaint() == {c.pk: 1 for c in overdue}
    assert Complaint.objects.breached().count() == 2500
    assert not Complaint.objects.get(pk=not_yet_due.pk).is_breached
    assert sweep_sla(now=now, batch_size=batch_size).breached == 0


def test_two_concurrent_sweeps_one_does_the_work_the_other_skips(maple):
    complaints = make_overdue(maple, 3)
    barrier = threading.Barrier(2)

    def sweep() -> SweepResult:
        barrier.wait(timeout=10)
        return sweep_sla()

    with worker_threads(2) as submit:
        # Hold point: whichever sweep wins the lock blocks on its first event INSERT.
        with table_locked("hoa_complaintevent"):
            runs = [submit(sweep), submit(sweep)]
            wait_until(lambda: backends_waiting(EVENT_INSERT), what="a sweep inside its pass")
            assert len(advisory_lock_holders(SLA_SWEEP_LOCK)) == 1
            done, _ = futures.wait(runs, timeout=30, return_when=futures.FIRST_COMPLETED)
            assert len(done) == 1, "the losing sweep must not wait for the winner"
            (loser,) = done
            (winner,) = [run for run in runs if run is not loser]
            assert loser.result() == SweepResult(acquired=False)
            assert not winner.done()
        assert winner.result(timeout=30) == SweepResult(acquired=True, breached=3, batches=1)

    assert breach_events_per_complaint() == {c.pk: 1 for c in complaints}
    assert advisory_lock_holders(SLA_SWEEP_LOCK) == []


def test_staff_edits_wait_for_at_most_the_current_batch_not_the_whole_sweep(maple):
    first, second, current, later = make_overdue(maple, 4)

    def staff_edit(complaint: Complaint) -> str:
        """Lock and edit ``complaint`` as staff would; NOWAIT fails at once if it is locked."""
        try:
            with transaction.atomic():
                row = Complaint.objects.select_for_update(nowait=True).get(pk=complaint.pk)
                row.title = f"{row.title} (edited)"
                row.save(update_fields=["title"])
        except DatabaseError:
            return "locked"
        return "edited"

    with worker_threads(2) as submit:
        # Hold point: an uncommitted breach event for the third complaint makes the sweep's
        # INSERT for it wait on the unique index, after batches one and two committed.
        with transaction.atomic():
            ComplaintEvent.objects.create(complaint=current, kind=ComplaintEvent.Kind.SLA_BREACHED)
            sweep = submit(sweep_sla, batch_size=1)
            wait_until(lambda: backends_waiting(EVENT_INSERT), what="the sweep at batch three")
            assert set(Complaint.objects.breached().values_list("pk", flat=True)) == {
                first.pk,
                second.pk,
            }
            edits = {
                name: submit(staff_edit, complaint).result(timeout=30)
                for name, complaint in [("done", first), ("current", current), ("later", later)]
            }
            assert not sweep.done()
            transaction.set_rollback(True)
        assert sweep.result(timeout=30) == SweepResult(acquired=True, breached=4, batches=4)

    # A processed row and an unprocessed one are free; only the current batch is locked.
    assert edits == {"done": "edited", "current": "locked", "later": "edited"}
    assert Complaint.objects.get(pk=later.pk).title.endswith("(edited)")
    assert Complaint.objects.get(pk=later.pk).is_breached
    assert breach_events_per_complaint() == {c.pk: 1 for c in (first, second, current, later)}


def test_sweep_skips_a_complaint_staff_hold_and_the_next_sweep_breaches_it(maple):
    complaints = make_overdue(maple, 4)
    held = complaints[1]
    staff_holds_row = threading.Event()
    staff_may_commit = threading.Event()

    def staff_editing() -> None:
        with transaction.atomic():
            Complaint.objects.select_for_update().get(pk=held.pk)
            staff_holds_row.set()
            assert staff_may_commit.wait(timeout=30)

    with worker_threads(2) as submit:
        staff = submit(staff_editing)
        assert staff_holds_row.wait(timeout=10)
        try:
            # Runs to the end while staff still hold the row: SKIP LOCKED, not a wait.
            result = submit(sweep_sla, batch_size=2).result(timeout=30)
        finally:
            staff_may_commit.set()
        staff.result(timeout=10)

    assert result == SweepResult(acquired=True, breached=3, batches=2)
    assert not Complaint.objects.get(pk=held.pk).is_breached
    assert sweep_sla() == SweepResult(acquired=True, breached=1, batches=1)
    assert breach_events_per_complaint() == {c.pk: 1 for c in complaints}


def test_sweep_refuses_to_run_inside_a_transaction_and_writes_nothing(maple):
    make_overdue(maple, 2)
    with pytest.raises(TransactionManagementError), transaction.atomic():
        sweep_sla()
    with pytest.raises(ValueError, match="batch_size"):
        sweep_sla(batch_size=0)
    assert Complaint.objects.breached().count() == 0
    assert ComplaintEvent.objects.count() == 0
    assert advisory_lock_holders(SLA_SWEEP_LOCK) == []


def test_a_sweep_whose_lock_connection_dies_mid_pass_finishes_and_warns(maple):
    complaints = make_overdue(maple, 2)

    with captured_log("hoa.jobs.scheduled") as log, worker_threads(1) as submit:
        with table_locked("hoa_complaintevent"):
            sweep = submit(sweep_sla)
            wait_until(lambda: backends_waiting(EVENT_INSERT), what="the sweep inside its pass")
            ((lock_pid, _),) = advisory_lock_holders(SLA_SWEEP_LOCK)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [lock_pid])
            wait_until(lambda: advisory_lock_holders(SLA_SWEEP_LOCK) == [], what="the lock to drop")
        result = sweep.result(timeout=30)

    # The batches never depended on the lock connection: the pass completes correctly.
    assert result == SweepResult(acquired=True, breached=2, batches=1)
    assert breach_events_per_complaint() == {c.pk: 1 for c in complaints}
    assert [r.outcome for r in log.records if r.levelname == "WARNING"] == ["lock_connection_lost"]
