"""The complaint's one rule table, and how every change holds it: one after the other on the
complaint's row lock, each event stamped after the lock so the timeline is in commit order.
"""

import re
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, transaction

from hoa.complaints.workflow import RULES, Change, add_note, change_sla, change_status
from hoa.models import Complaint, ComplaintEvent
from tests.harness.waiting import wait_until
from tests.jobs_support import backends_waiting
from tests.vendors_support import WAIT, Worker

S = Complaint.Status
GUIDE = Path(settings.BASE_DIR) / "docs" / "staff-guide.md"
# The rows of the staff guide's table, by the words people read.
ROWS = {
    "open a complaint": Change.OPEN,
    "status change": Change.STATUS,
    "note": Change.NOTE,
    "SLA change": Change.SLA,
    "assign a first vendor": Change.ASSIGN,
    "reassign (replace the vendor)": Change.REASSIGN,
    "told-in-vain cancellation": Change.CANCEL,
}
COLUMNS = {"open": S.OPEN, "assigned": S.ASSIGNED, "in progress": S.IN_PROGRESS}
COLUMNS |= {"resolved": S.RESOLVED, "closed": S.CLOSED}


def guide_rule_table() -> dict[Change, frozenset[str]]:
    """The staff guide's rule table ("Statuses"): for each change, the statuses whose cell
    starts with "yes" (or "reopen", the one way out of closed)."""
    section = GUIDE.read_text().split("## Statuses", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header[0] == "change", "the rule table is the first table of the section"
    statuses = [COLUMNS[name] for name in header[1:]]
    table = {}
    for line in lines[1:]:
        cells = [cell.strip().strip("*") for cell in line.strip("|").split("|")]
        if cells[0] not in ROWS:
            break  # the end of the table
        allowed = {
            s for s, cell in zip(statuses, cells[1:], strict=True) if re.match(r"yes|reopen", cell)
        }
        table[ROWS[cells[0]]] = frozenset(allowed)
    return table


def test_the_staff_guide_shows_the_rule_table_the_code_holds():
    assert guide_rule_table() == RULES


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Loose railing", priority="normal")


@pytest.mark.django_db(transaction=True)
def test_a_note_and_a_status_change_run_in_turn_and_the_timeline_is_in_commit_order(
    complaint, alice
):
    """A third connection holds the complaint's row lock. A status change starts and waits
    on it; then a note starts, and waits on it too. Each event is stamped after the lock,
    so whichever commits first is first on the timeline (an event's id is taken at its
    insert, under the lock: the order they committed in)."""
    locked, release = threading.Event(), threading.Event()

    def hold_row():
        try:
            with transaction.atomic():
                Complaint.objects.select_for_update().get(pk=complaint.pk)
                locked.set()
                release.wait(WAIT)
        finally:
            connection.close()

    holder = Worker(hold_row, name="holder")
    holder.start()
    assert locked.wait(WAIT)
    status = Worker(
        lambda: change_status(
            complaint=Complaint.objects.get(pk=complaint.pk),
            seen=S.OPEN,
            to=S.RESOLVED,
            note="Tightened.",
            actor=alice,
            assigned=False,
        ),
        name="status",
    )
    status.start()
    wait_until(lambda: len(backends_waiting("%")) == 1, what="the status change to wait")
    note = Worker(
        lambda: add_note(complaint=complaint, note="The owner called.", actor=alice), name="note"
    )
    note.start()
    wait_until(lambda: len(backends_waiting("%")) == 2, what="the note to wait on the row lock")
    release.set()

    assert holder.outcome() is None
    assert status.outcome().to == S.RESOLVED
    assert note.outcome().kind == "note"
    events = ComplaintEvent.objects.filter(complaint=complaint)
    by_time = list(events.order_by("at", "id").values_list("kind", flat=True))
    by_commit = list(events.order_by("id").values_list("kind", flat=True))
    assert sorted(by_commit) == ["note", "status_changed"]
    assert by_time == by_commit


@pytest.mark.django_db(transaction=True)
def test_a_change_that_waited_for_the_lock_is_stamped_after_the_change_it_waited_for(
    complaint, alice
):
    """The SLA change holds the lock while the close waits for it: the close's time (its
    event, ``closed_at``) is after the SLA change's, though it was asked first."""
    locked, release = threading.Event(), threading.Event()

    def hold_row_then_change_the_sla():
        try:
            with transaction.atomic():
                Complaint.objects.select_for_update().get(pk=complaint.pk)
                locked.set()
                release.wait(WAIT)
                change_sla(
                    complaint=complaint,
                    due_at=complaint.sla_due_at + (complaint.sla_due_at - complaint.opened_at),
                    reason="Parts on order.",
                    actor=alice,
                )
        finally:
            connection.close()

    sla = Worker(hold_row_then_change_the_sla, name="sla")
    sla.start()
    assert locked.wait(WAIT)
    close = Worker(
        lambda: change_status(
            complaint=Complaint.objects.get(pk=complaint.pk),
            seen=S.OPEN,
            to=S.CLOSED,
            note="A duplicate.",
            actor=alice,
            assigned=False,
        ),
        name="close",
    )
    close.start()
    wait_until(lambda: len(backends_waiting("%")) == 1, what="the close to wait on the row lock")
    release.set()

    assert sla.outcome() is None
    assert close.outcome().to == S.CLOSED
    sla_changed, closed = ComplaintEvent.objects.filter(complaint=complaint).order_by("id")
    assert (sla_changed.kind, closed.to_status) == ("sla_changed", S.CLOSED)
    assert sla_changed.at < closed.at == Complaint.objects.get(pk=complaint.pk).closed_at


@pytest.mark.django_db(transaction=True)
def test_a_page_that_showed_a_vendor_since_ended_by_a_close_gets_409_not_a_rule(
    complaint, pipe, alice, client
):
    """Found by the fault suite's status changes: the page showed a resolved complaint with
    its vendor (so it offered "in progress"); a colleague closed it, which ended the
    vendor. Posting the page's change is a change from a status that is gone: 409 with
    the status now, not the 400 of a rule ("assign a vendor first") read against a vendor
    the page never saw leave."""
    from vendors.services import assign_vendor

    assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    change_status(complaint=complaint, seen=S.ASSIGNED, to=S.RESOLVED, note="Done.", actor=alice)
    change_status(complaint=complaint, seen=S.RESOLVED, to=S.CLOSED, note="", actor=alice)
    client.force_login(alice)

    response = client.post(
        f"/orgs/maple-court/complaints/{complaint.pk}/status/",
        {"from_status": S.RESOLVED, "to_status": S.IN_PROGRESS, "note": "It leaks again."},
    )

    assert response.status_code == 409
    assert "it is closed now, not resolved; nothing was saved" in response.content.decode()
