"""A closed complaint gets no vendor, at every way in: the page, the admin, the command and
the service; and closing ends the vendor a complaint had.

Closed is final (RULES, hoa/complaints/workflow.py): assigning or reassigning a closed complaint is
refused, 400 / error / exit 1 when the caller saw it closed, 409 / warning / exit 1 when it
was closed since the caller looked (overtaken: trying again cannot help), and nothing is
written. A resolved complaint keeps its
rules: its vendor may be replaced.
"""

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from hoa.complaints.workflow import change_status
from hoa.models import Complaint, ComplaintEvent
from locking.models import FenceEvent
from tests.harness.processes import start_manage
from tests.vendors_support import (
    WAIT,
    active_assignments,
    cancellations,
    dispatch_of,
    dispatches,
    shown_assignments,
    state_of,
)
from vendors.dispatch import idempotency_key
from vendors.exceptions import ClosedSinceViewed, ComplaintClosed
from vendors.models import VendorAssignment
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)

S = Complaint.Status
CHANGELIST = reverse("admin:hoa_complaint_changelist")


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Broken gate", priority="high")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def detail_url(complaint) -> str:
    return reverse("complaints:complaint", args=[complaint.organization.slug, complaint.pk])


def assign_url(complaint) -> str:
    return reverse("vendors:assign", args=[complaint.organization.slug, complaint.pk])


def close(complaint, actor, *, seen=S.OPEN) -> Complaint:
    change_status(
        complaint=complaint, seen=seen, to=S.CLOSED, note="A duplicate.", actor=actor, assigned=None
    )
    complaint.refresh_from_db()
    return complaint


def nothing_written(complaint, before, redis_client, dispatch) -> None:
    assert state_of(complaint, redis_client) == before
    assert FenceEvent.objects.count() == 0  # refused before any lease
    assert dispatch.received == []


# --- the page ----------------------------------------------------------------------------


def test_a_closed_complaint_shows_no_assign_card(complaint, pipe, alice):
    client = client_for(alice)
    assert "Assign a vendor</h2>" in client.get(detail_url(complaint)).content.decode()

    close(complaint, alice)

    html = client.get(detail_url(complaint)).content.decode()
    assert "Assign a vendor</h2>" not in html and "Reassign</h2>" not in html
    assert assign_url(complaint) not in html


def test_assigning_from_a_page_that_showed_it_closed_is_400_with_the_layout_and_a_way_back(
    complaint, pipe, alice, dispatch, redis_client
):
    close(complaint, alice)
    before = state_of(complaint, redis_client)

    for form in ({"vendor": pipe.pk, "seen_status": S.CLOSED}, {"vendor": pipe.pk}):
        response = client_for(alice).post(assign_url(complaint), form)

        assert response.status_code == 400
        html = response.content.decode()
        assert "<h1>This complaint is closed</h1>" in html
        assert (
            f"Complaint #{complaint.pk} is closed, and a closed complaint gets no vendor. "
            "Reopen it first if it needs one."
        ) in html
        assert '<nav class="subnav" aria-label="Maple Court">' in html  # its navigation
        assert f'href="{detail_url(complaint)}" data-testid="back">Back</a>' in html
        nothing_written(complaint, before, redis_client, dispatch)


def test_assigning_from_a_page_shown_before_the_complaint_was_closed_is_409(
    complaint, pipe, alice, dispatch, redis_client
):
    page = client_for(alice).get(detail_url(complaint)).content.decode()
    assert '<input type="hidden" name="seen_status" value="open"' in page
    close(complaint, alice)
    before = state_of(complaint, redis_client)

    response = client_for(alice).post(
        assign_url(complaint), {"vendor": pipe.pk, "seen_status": S.OPEN}
    )

    assert response.status_code == 409
    html = response.content.decode()
    assert "<h1>The complaint was closed meanwhile</h1>" in html
    assert (
        f"Complaint #{complaint.pk} was closed since you looked, so no vendor was assigned; "
        "nothing was saved. Reopen it first if it needs one."
    ) in html
    assert '<nav class="subnav" aria-label="Maple Court">' in html
    assert f'href="{detail_url(complaint)}">Back</a>' in html
    assert "Try again" not in html  # nothing to try again: it is closed
    nothing_written(complaint, before, redis_client, dispatch)


# --- the admin and the command -----------------------------------------------------------


def test_the_admin_action_on_a_closed_complaint_is_an_error_and_writes_nothing(
    complaint, pipe, alice, root, dispatch, redis_client
):
    close(complaint, alice)
    before = state_of(complaint, redis_client)
    client = client_for(root)
    data = {
        "action": "assign_vendor",
        "_selected_action": [complaint.pk],
        **shown_assignments([complaint]),
        "apply": "1",
        "vendor": pipe.pk,
    }

    response = client.post(CHANGELIST, data, follow=True)

    assert [(m.level_tag, str(m)) for m in response.context["messages"]] == [
        (
            "error",
            f"Complaint #{complaint.pk} is closed, and a closed complaint gets no vendor. "
            "Reopen it first if it needs one.",
        )
    ]
    nothing_written(complaint, before, redis_client, dispatch)


def test_the_command_on_a_closed_complaint_exits_1_with_one_line(
    complaint, pipe, alice, dispatch, redis_client
):
    close(complaint, alice)
    before = state_of(complaint, redis_client)

    with pytest.raises(CommandError) as refused:
        call_command(
            "assign_vendor", "--complaint", str(complaint.pk), "--vendor", str(pipe.pk),
            stdout=StringIO(), stderr=StringIO(),
        )  # fmt: skip

    assert refused.value.returncode == 1
    assert str(refused.value) == (
        f"Complaint #{complaint.pk} is closed, and a closed complaint gets no vendor. "
        "Reopen it first if it needs one."
    )
    nothing_written(complaint, before, redis_client, dispatch)


def test_the_command_whose_complaint_is_closed_during_its_dispatch_exits_1(
    subprocess_env, complaint, pipe, alice, dispatch
):
    gate = dispatch.hold(dispatch_of(pipe))
    env = {**subprocess_env, "VENDOR_DISPATCH_URL": dispatch.url_for("dispatch")}
    command = start_manage(
        "assign_vendor", "--complaint", complaint.pk, "--vendor", pipe.pk, env=env
    )
    try:
        gate.wait_arrived(1, timeout=WAIT * 2)  # it looked (open) and called the vendor
        close(complaint, alice)
        gate.release()
        stdout, stderr = command.communicate(timeout=WAIT)
    finally:
        gate.release()
        if command.poll() is None:
            command.kill()
            command.wait()

    assert command.returncode == 1  # overtaken: cron's "try again later" would never help
    lines = [line for line in stderr.splitlines() if line and " INFO " not in line]
    assert lines == [
        f"CommandError: Complaint #{complaint.pk} was closed since you looked, so no vendor "
        "was assigned; nothing was saved. Reopen it first if it needs one; Pipe Pros was told "
        "in vain; cancellation sent (HTTP 200)"
    ]
    assert stdout == ""
    assert not VendorAssignment.objects.exists()
    [cancel] = cancellations(dispatch)
    assert (cancel.json["reason"], cancel.token) == ("refused-at-commit", 1)
    assert FenceEvent.objects.get(token=1).outcome == "conflict"


# --- the service -------------------------------------------------------------------------


def test_a_copy_that_says_open_is_refused_by_the_look_before_the_vendor_is_called(
    complaint, pipe, alice, dispatch
):
    stale = Complaint.objects.get(pk=complaint.pk)  # read before the close
    close(complaint, alice)

    with pytest.raises(ClosedSinceViewed) as refused:
        assign_vendor(complaint=stale, vendor=pipe, actor=alice)

    assert (refused.value.seen, refused.value.told_in_vain) == (S.OPEN, None)
    assert dispatch.received == []  # the look found it closed: nobody was called
    assert not VendorAssignment.objects.exists()
    [event] = FenceEvent.objects.all()
    assert (event.outcome, event.token) == ("conflict", 1)


def test_the_callers_copy_saying_closed_is_refused_before_the_lease(complaint, pipe, alice):
    close(complaint, alice)
    with pytest.raises(ComplaintClosed):
        assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    with pytest.raises(ClosedSinceViewed):  # the caller had decided on "open"
        assign_vendor(complaint=complaint, vendor=pipe, actor=alice, seen_status=S.OPEN)
    assert FenceEvent.objects.count() == 0


def test_a_resolved_complaint_keeps_its_vendor_rules(complaint, pipe, green, alice, dispatch):
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    change_status(
        complaint=complaint,
        seen=S.ASSIGNED,
        to=S.RESOLVED,
        note="Fixed.",
        actor=alice,
        assigned=True,
    )

    replaced = assign_vendor(
        complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=first
    )

    assert replaced.outcome == "committed"
    complaint.refresh_from_db()
    assert complaint.status == S.RESOLVED  # a replacement keeps the status
    assert [a.vendor for a in active_assignments(complaint)] == [green]
    assert (
        "Assign a vendor</h2>" not in client_for(alice).get(detail_url(complaint)).content.decode()
    )
    assert "Reassign</h2>" in client_for(alice).get(detail_url(complaint)).content.decode()


# --- closing ends the vendor -------------------------------------------------------------


def test_closing_ends_the_vendors_assignment_and_tells_the_vendor(complaint, pipe, alice, dispatch):
    assignment = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment

    response = client_for(alice).post(
        reverse("complaints:status", args=[complaint.organization.slug, complaint.pk]),
        {"from_status": S.ASSIGNED, "to_status": S.CLOSED, "note": "Withdrawn by the owner."},
    )

    assert response.status_code == 303
    complaint.refresh_from_db()
    assignment.refresh_from_db()
    assert complaint.status == S.CLOSED
    assert (assignment.active, assignment.ended_because) == (False, "closed")
    assert assignment.deactivated_at == complaint.closed_at
    [cancel] = cancellations(dispatch)  # after the close committed
    assert (cancel.path, cancel.token, cancel.idempotency_key) == (
        "/dispatch/cancel",
        assignment.fence_token,
        idempotency_key(complaint_id=complaint.pk, vendor_id=pipe.pk, replacing_id=None),
    )
    assert (cancel.json["reason"], cancel.json["now_assigned"]) == ("complaint-closed", None)
    html = client_for(alice).get(detail_url(complaint)).content.decode()
    words = re.sub(r"<[^>]+>", "", html)  # the page's words, not its markup
    assert re.search(r"ended \d{4}-\d\d-\d\d \d\d:\d\d \w+: complaint closed", words)
    # One event per change: the assignment's (open to assigned) and the close's.
    events = ComplaintEvent.objects.filter(complaint=complaint).order_by("at", "pk")
    assert list(events.values_list("to_status", flat=True)) == [S.ASSIGNED, S.CLOSED]


def test_reopened_the_complaint_has_no_vendor_and_the_same_vendor_again_is_a_new_change(
    complaint, pipe, alice, dispatch
):
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    close(complaint, alice, seen=S.ASSIGNED)
    reopen = {"seen": S.CLOSED, "to": S.OPEN, "note": "It leaks again.", "assigned": False}
    change_status(complaint=complaint, actor=alice, **reopen)
    complaint.refresh_from_db()
    assert complaint.status == S.OPEN  # no vendor any more: reopened to open, not assigned

    again = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    assert again.outcome == "committed" and again.assignment.pk != first.pk
    [_, second] = dispatches(dispatch)
    # Named after the assignment the close ended (and the close): a new key, not a replay.
    closed = ComplaintEvent.objects.get(complaint=complaint, to_status=S.CLOSED)
    assert second.idempotency_key == idempotency_key(
        complaint_id=complaint.pk, vendor_id=pipe.pk, replacing_id=first.pk, closed_id=closed.pk
    )
    assert second.verdict == "accepted"
    assert second.json["replacing"] is None  # no vendor was replaced
    complaint.refresh_from_db()
    assert complaint.status == S.ASSIGNED
