"""Closing a complaint while a vendor is being assigned to it: each order, forced.

One staff member closes the complaint (``change_status``) while another assigns a vendor
(``assign_vendor``), each in a thread of its own with its own database connection. Hold
points force the order each test claims:

- *close first*: the assignment is held inside its dispatch call (a gate of the local
  dispatch stand-in) after its look found the complaint open; the close commits; then the
  assignment goes on to its commit;
- *assignment first*: the assignment is held inside its commit's transaction, after its
  fence took the complaint's row lock (a third connection holds a SHARE lock on the
  assignments table, which its INSERT waits for); the close starts and provably waits on
  the row lock; then the assignment commits and the close goes on.

Either way the complaint ends in one consistent state: closed with no vendor active and
none assigned after it was closed (the close ended the vendor's assignment, or refused the
late one, whose vendor was told in vain and gets the cancellation), or assigned and not
closed (the close found the status changed). Before the close ended assignments and the
assignment checked the status, both were told "done" and the complaint ended closed with
a vendor assigned after the close.
"""

import threading

import pytest
from django.db import connection, transaction

from hoa.complaints.exceptions import StatusChanged
from hoa.complaints.workflow import StatusChange, change_status
from hoa.models import Complaint, ComplaintEvent, StaffMembership
from tests.harness.waiting import wait_until
from tests.jobs_support import backends_waiting
from tests.vendors_support import WAIT, Worker, cancellations, dispatch_of
from vendors.dispatch import idempotency_key
from vendors.exceptions import ClosedSinceViewed
from vendors.models import VendorAssignment
from vendors.selectors import active_assignment
from vendors.services import AssignmentResult, assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)

S = Complaint.Status
# Where the close starts from: an open complaint gets its first vendor; one in progress
# has its vendor replaced (its status stays, so the close can win after the assignment).
STARTS = [S.OPEN, S.IN_PROGRESS]


@pytest.fixture
def bob(django_user_model, maple, staff_permissions):
    user = django_user_model.objects.create_user(username="bob", password="pw-bob")
    user.groups.add(staff_permissions)
    StaffMembership.objects.create(user=user, organization=maple)
    return user


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Water in the basement")


def starting(complaint, status, *, vendor, actor) -> VendorAssignment | None:
    """Put ``complaint`` in ``status`` through the services; return its active assignment."""
    if status == S.IN_PROGRESS:
        assign_vendor(complaint=complaint, vendor=vendor, actor=actor)
        change_status(
            complaint=complaint,
            seen=S.ASSIGNED,
            to=S.IN_PROGRESS,
            note="",
            actor=actor,
            assigned=True,
        )
    complaint.refresh_from_db()
    assert complaint.status == status
    return active_assignment(complaint)


def assigning(complaint, vendor, actor, replacing) -> Worker:
    """The assignment (a reassignment of ``replacing`` when there is one), in a thread."""
    return Worker(
        lambda: assign_vendor(
            complaint=complaint,
            vendor=vendor,
            actor=actor,
            reassign=replacing is not None,
            replacing=replacing,
        ),
        name="assign",
    )


def closing(complaint, status, actor) -> Worker:
    """The close, from the status the staff member's page showed, in a thread (with its own
    copy of the complaint, as another request would have)."""
    return Worker(
        lambda: change_status(
            complaint=Complaint.objects.get(pk=complaint.pk),
            seen=status,
            to=S.CLOSED,
            note="A duplicate.",
            actor=actor,
            assigned=None,  # what the page read does not decide: the row under its lock does
        ),
        name="close",
    )


def consistent(complaint) -> Complaint:
    """Assert the complaint is in one of the consistent states; return it."""
    complaint.refresh_from_db()
    active = list(VendorAssignment.objects.filter(complaint=complaint, active=True))
    if complaint.status == S.CLOSED:
        assert active == []
        late = complaint.assignments.filter(assigned_at__gt=complaint.closed_at)
        assert list(late) == []
    else:
        assert len(active) == 1
    return complaint


@pytest.mark.parametrize("status", STARTS)
def test_a_close_committed_while_the_vendor_is_dispatched_refuses_the_assignment(
    complaint, pipe, green, alice, bob, dispatch, status
):
    before = starting(complaint, status, vendor=pipe, actor=alice)
    gate = dispatch.hold(dispatch_of(green))
    assignment = assigning(complaint, green, alice, before)
    assignment.start()
    gate.wait_arrived(1)  # looked (not closed), and inside its dispatch call

    close = closing(complaint, status, bob)
    close.start()
    closed = close.outcome()  # committed while the assignment waits at the gate
    gate.release()
    late = assignment.outcome()

    assert isinstance(closed, StatusChange) and closed.to == S.CLOSED
    assert isinstance(late, ClosedSinceViewed)
    assert (late.seen, late.now_assigned, late.told_in_vain) == (status, None, green)
    assert late.cancellation == "cancellation sent (HTTP 200)"
    complaint = consistent(complaint)
    assert complaint.status == S.CLOSED
    assert not VendorAssignment.objects.filter(vendor=green).exists()  # nothing of green's
    told = [(c.json["vendor"]["id"], c.json["reason"], c.token) for c in cancellations(dispatch)]
    if before is None:
        assert told == [(green.pk, "refused-at-commit", 1)]
    else:
        before.refresh_from_db()  # the close ended pipe's assignment, and told pipe
        assert (before.active, before.ended_because) == (False, "closed")
        assert before.deactivated_at == complaint.closed_at
        assert told == [(pipe.pk, "complaint-closed", 1), (green.pk, "refused-at-commit", 2)]
    # One event for the one change of this race that committed: the close.
    [event] = ComplaintEvent.objects.filter(complaint=complaint, to_status=S.CLOSED)
    assert (event.from_status, event.at) == (status, complaint.closed_at)


@pytest.mark.parametrize("status", STARTS)
def test_an_assignment_committed_while_the_close_waits_is_ended_or_changes_the_close(
    complaint, pipe, green, alice, bob, dispatch, status
):
    before = starting(complaint, status, vendor=pipe, actor=alice)
    table_locked, release_table = threading.Event(), threading.Event()

    def hold_the_assignments_table():
        # The assignment's INSERT (after its fence UPDATE took the complaint's row lock)
        # waits for this lock: the hold point inside the assignment's transaction.
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("LOCK TABLE vendors_vendorassignment IN SHARE MODE")
                table_locked.set()
                release_table.wait(WAIT)
        finally:
            connection.close()

    holder = Worker(hold_the_assignments_table, name="holder")
    holder.start()
    assert table_locked.wait(WAIT)
    assignment = assigning(complaint, green, alice, before)
    assignment.start()
    wait_until(lambda: len(backends_waiting("%")) == 1, what="the assignment's write to wait")
    close = closing(complaint, status, bob)
    close.start()
    wait_until(lambda: len(backends_waiting("%")) == 2, what="the close to wait on the row lock")
    release_table.set()

    assigned = assignment.outcome()
    closed = close.outcome()
    assert holder.outcome() is None

    assert isinstance(assigned, AssignmentResult) and assigned.outcome == "committed"
    mine = assigned.assignment
    complaint = consistent(complaint)
    if status == S.OPEN:
        # The assignment moved the complaint to assigned: the close, decided on "open",
        # changes nothing and says what the status is now.
        assert isinstance(closed, StatusChanged)
        assert (closed.seen, closed.current) == (S.OPEN, S.ASSIGNED)
        assert complaint.status == S.ASSIGNED
        assert active_assignment(complaint).pk == mine.pk
        assert cancellations(dispatch) == []
        return
    # In progress keeps its status through a reassignment: the close commits after it and
    # ends the new vendor's assignment in its own transaction, then tells the vendor.
    assert isinstance(closed, StatusChange) and closed.to == S.CLOSED
    assert complaint.status == S.CLOSED
    mine.refresh_from_db()
    assert (mine.active, mine.ended_because) == (False, "closed")
    assert mine.assigned_at < complaint.closed_at == mine.deactivated_at
    [told] = cancellations(dispatch)
    assert (told.json["vendor"]["id"], told.json["reason"], told.token) == (
        green.pk,
        "complaint-closed",
        mine.fence_token,
    )
    assert told.idempotency_key == idempotency_key(
        complaint_id=complaint.pk, vendor_id=green.pk, replacing_id=before.pk
    )
    [event] = ComplaintEvent.objects.filter(complaint=complaint, to_status=S.CLOSED)
    assert event.at == complaint.closed_at
