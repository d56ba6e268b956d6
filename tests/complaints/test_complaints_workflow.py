"""The complaint workflow through its pages: every rule, the compare-and-swap, the refusals.

``hoa.complaints`` holds the rules and the complaint page with their endpoints:
``…/status/`` (from_status, to_status, note), ``…/notes/`` and ``…/sla/``.
"""

import re
import threading
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from hoa.complaints.extensions import assigned
from hoa.models import AccessDenial, Complaint, ComplaintEvent, StaffMembership
from tests.harness.registry import pages_removed
from tests.harness.waiting import wait_until
from tests.vendors_support import WAIT, Worker, active_vendor
from vendors.models import VendorAssignment
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db
fenced = pytest.mark.django_db(transaction=True)

S = Complaint.Status
NOTE = "Plumber replaced the valve."


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(
        organization=maple, unit=maple.units.first(), title="Leaking pipe", priority="high"
    )


@pytest.fixture
def bob(django_user_model, maple, staff_permissions):
    user = django_user_model.objects.create_user(username="bob", password="pw-bob")
    user.groups.add(staff_permissions)
    StaffMembership.objects.create(user=user, organization=maple)
    return user


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(name: str, complaint, slug=None) -> str:
    namespace = "vendors" if name == "assign" else "complaints"
    return reverse(f"{namespace}:{name}", args=[slug or complaint.organization.slug, complaint.pk])


def given(complaint, status: str, *, vendor=None) -> Complaint:
    """Put the complaint in ``status`` (and give it an active vendor) without the workflow."""
    Complaint.objects.filter(pk=complaint.pk).update(status=status)
    if vendor is not None:
        VendorAssignment.objects.create(complaint=complaint, vendor=vendor, fence_token=1)
    complaint.refresh_from_db()
    return complaint


def written(complaint) -> tuple:
    """What a refused request must leave unchanged."""
    row = Complaint.objects.get(pk=complaint.pk)
    events = tuple(ComplaintEvent.objects.filter(complaint=complaint).values_list("pk", "kind"))
    return row.status, row.sla_due_at, row.closed_at, events


def post_status(user, complaint, seen, to, note=""):
    data = {"from_status": seen, "to_status": to, "note": note}
    return client_for(user).post(url("status", complaint), data)


# --- every rule --------------------------------------------------------------------------

RULES = [
    # (status, has vendor, to, note, HTTP, status after or the sentence of the refusal)
    (S.OPEN, False, S.RESOLVED, NOTE, 303, S.RESOLVED),
    (S.OPEN, False, S.RESOLVED, "", 400, "Say in a note what was done to resolve"),
    (S.OPEN, False, S.CLOSED, "Duplicate of #3.", 303, S.CLOSED),
    (S.OPEN, False, S.CLOSED, "", 400, "Say in a note why the complaint is closed without"),
    (S.OPEN, False, S.IN_PROGRESS, NOTE, 400, "Assign a vendor before marking the complaint"),
    (S.OPEN, False, S.ASSIGNED, NOTE, 400, "becomes assigned when a vendor is assigned"),
    (S.OPEN, False, S.OPEN, NOTE, 400, "The complaint is already open."),
    (S.ASSIGNED, True, S.IN_PROGRESS, "", 303, S.IN_PROGRESS),
    (S.ASSIGNED, True, S.RESOLVED, "", 400, "Say in a note what was done to resolve"),
    (S.ASSIGNED, True, S.CLOSED, "", 400, "Say in a note why the complaint is closed without"),
    (S.ASSIGNED, True, S.OPEN, NOTE, 400, "A complaint that is assigned cannot become open."),
    (S.IN_PROGRESS, True, S.RESOLVED, NOTE, 303, S.RESOLVED),
    (S.IN_PROGRESS, True, S.RESOLVED, "  ", 400, "Say in a note what was done to resolve"),
    (S.IN_PROGRESS, True, S.ASSIGNED, NOTE, 400, "becomes assigned when a vendor is assigned"),
    (S.IN_PROGRESS, True, S.OPEN, NOTE, 400, "in progress cannot become open."),
    (S.RESOLVED, True, S.CLOSED, "", 303, S.CLOSED),
    (S.RESOLVED, True, S.IN_PROGRESS, "It leaks again.", 303, S.IN_PROGRESS),
    (S.RESOLVED, True, S.IN_PROGRESS, "", 400, "why work on the complaint starts again"),
    (S.RESOLVED, False, S.IN_PROGRESS, "It leaks again.", 400, "Assign a vendor before"),
    (S.RESOLVED, False, S.OPEN, "It leaks again.", 303, S.OPEN),
    (S.RESOLVED, True, S.OPEN, "It leaks again.", 303, S.ASSIGNED),
    (S.CLOSED, True, S.OPEN, "Closed by mistake.", 303, S.ASSIGNED),
    (S.CLOSED, False, S.OPEN, "Closed by mistake.", 303, S.OPEN),
    (S.CLOSED, False, S.OPEN, "", 400, "Say in a note why the complaint is reopened."),
    (S.CLOSED, True, S.IN_PROGRESS, NOTE, 400, "A closed complaint is final"),
    (S.CLOSED, True, S.RESOLVED, NOTE, 400, "A closed complaint is final"),
    (S.OPEN, False, S.RESOLVED, "x" * 2001, 400, "Keep the note under 2000 characters."),
]


@pytest.mark.parametrize(
    ("status", "has_vendor", "to", "note", "code", "expected"),
    RULES,
    ids=[
        f"{r[0]}{'+vendor' if r[1] else ''}->{r[2]}{'+note' if r[3].strip() else ''}" for r in RULES
    ],
)
def test_every_rule_of_the_workflow(
    complaint, pipe, alice, status, has_vendor, to, note, code, expected
):
    given(complaint, status, vendor=pipe if has_vendor else None)
    before = written(complaint)

    response = post_status(alice, complaint, status, to, note)

    assert response.status_code == code
    if code == 303:
        assert response["Location"] == url("complaint", complaint)
        complaint.refresh_from_db()
        assert complaint.status == expected
        event = ComplaintEvent.objects.get(complaint=complaint)
        assert (event.kind, event.from_status, event.to_status) == (
            "status_changed",
            status,
            expected,
        )
        assert (event.actor, event.actor_label, event.detail) == (alice, "alice", note.strip())
    else:
        assert expected in response.content.decode()
        assert written(complaint) == before


def test_closing_records_who_and_when_and_reopening_clears_it(complaint, alice, bob):
    given(complaint, S.RESOLVED)
    before = timezone.now()

    assert post_status(alice, complaint, S.RESOLVED, S.CLOSED).status_code == 303

    complaint.refresh_from_db()
    assert complaint.closed_by == alice and complaint.closed_at >= before
    page = client_for(bob).get(url("complaint", complaint)).content.decode()
    # A moment is kept on one line (<span class="moment">): read the text.
    text = re.sub(r"<[^>]+>", "", page)
    assert f"by alice on {timezone.localtime(complaint.closed_at):%Y-%m-%d %H:%M}" in text

    assert post_status(bob, complaint, S.CLOSED, S.OPEN, "Not fixed.").status_code == 303

    complaint.refresh_from_db()
    assert (complaint.status, complaint.closed_by, complaint.closed_at) == (S.OPEN, None, None)


def test_the_menu_offers_only_the_changes_the_rules_allow(complaint, pipe, alice):
    def offered():
        page = client_for(alice).get(url("complaint", complaint))
        return [v for v, _ in page.context["status_form"].fields["to_status"].widget.choices if v]

    assert offered() == [S.RESOLVED, S.CLOSED]  # no vendor: not in progress
    given(complaint, S.ASSIGNED, vendor=pipe)
    assert offered() == [S.IN_PROGRESS, S.RESOLVED, S.CLOSED]
    given(complaint, S.CLOSED)
    assert offered() == [S.OPEN]  # "Reopen"


@fenced
def test_assigning_a_vendor_moves_an_open_complaint_to_assigned_in_the_fenced_transaction(
    complaint, pipe, green, alice
):
    result = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    complaint.refresh_from_db()
    assert complaint.status == S.ASSIGNED
    event = ComplaintEvent.objects.get(complaint=complaint)
    assert (event.from_status, event.to_status, event.actor) == (S.OPEN, S.ASSIGNED, alice)
    assert event.detail == "Pipe Pros assigned."
    assert event.at == result.assignment.assigned_at

    # A later status is kept: reassigning an in-progress complaint does not move it.
    given(complaint, S.IN_PROGRESS)
    assign_vendor(
        complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=result.assignment
    )
    complaint.refresh_from_db()
    assert complaint.status == S.IN_PROGRESS
    assert ComplaintEvent.objects.filter(complaint=complaint).count() == 1


@fenced
def test_the_status_a_reassignment_reads_under_the_row_lock_decides_not_the_callers_copy(
    complaint, maple, pipe, green, alice
):
    tap = active_vendor("Tap Masters", maple)
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    # A reopen that raced an assignment can leave a complaint open with a vendor; the
    # caller's copy still says assigned.
    Complaint.objects.filter(pk=complaint.pk).update(status=S.OPEN)
    second = assign_vendor(
        complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=first
    ).assignment
    assert Complaint.objects.get(pk=complaint.pk).status == S.ASSIGNED
    # And the other way round: the caller's copy says open, the row says in progress.
    Complaint.objects.filter(pk=complaint.pk).update(status=S.IN_PROGRESS)
    complaint.status = S.OPEN
    assign_vendor(complaint=complaint, vendor=tap, actor=alice, reassign=True, replacing=second)

    assert Complaint.objects.get(pk=complaint.pk).status == S.IN_PROGRESS
    events = ComplaintEvent.objects.filter(complaint=complaint).order_by("pk")
    assert list(events.values_list("from_status", "to_status", "detail")) == [
        (S.OPEN, S.ASSIGNED, "Pipe Pros assigned."),
        (S.OPEN, S.ASSIGNED, "Evergreen assigned."),
    ]


@fenced
def test_an_assignment_refused_at_commit_moves_no_status(complaint, pipe, green, alice):
    assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    given(complaint, S.OPEN)  # as if an old complaint had a vendor but no status for it

    with pytest.raises(Exception, match="already has a vendor"):
        assign_vendor(complaint=complaint, vendor=green, actor=alice)

    complaint.refresh_from_db()
    assert complaint.status == S.OPEN
    assert ComplaintEvent.objects.filter(complaint=complaint).count() == 1  # the first one


# --- the compare-and-swap ----------------------------------------------------------------


def test_a_change_from_a_stale_page_is_409_and_writes_nothing(complaint, pipe, alice, bob):
    given(complaint, S.ASSIGNED, vendor=pipe)
    assert post_status(bob, complaint, S.ASSIGNED, S.IN_PROGRESS).status_code == 303
    before = written(complaint)

    # Alice's page still shows "assigned".
    response = post_status(alice, complaint, S.ASSIGNED, S.RESOLVED, NOTE)

    assert response.status_code == 409
    html = response.content.decode()
    assert "<h1>The status changed meanwhile</h1>" in html
    assert "it is in progress now, not assigned; nothing was saved." in html
    # "Try again" applies the same change to the status the complaint has now.
    assert '<input type="hidden" name="from_status" value="in_progress">' in html
    assert '<input type="hidden" name="to_status" value="resolved">' in html
    assert f'<input type="hidden" name="note" value="{NOTE}">' in html
    assert written(complaint) == before

    retried = post_status(alice, complaint, S.IN_PROGRESS, S.RESOLVED, NOTE)
    assert retried.status_code == 303
    assert Complaint.objects.get(pk=complaint.pk).status == S.RESOLVED


@fenced
def test_two_staff_changing_the_status_at_once_one_wins_the_other_gets_409(
    complaint, pipe, alice, bob
):
    given(complaint, S.ASSIGNED, vendor=pipe)
    # A third connection holds the complaint's row lock, so both requests validate against
    # "assigned" and reach their UPDATE before either can write: the interleaving in which
    # a read-then-compare would let both win.
    locked, release = threading.Event(), threading.Event()

    def hold_row():
        try:
            with transaction.atomic():
                Complaint.objects.select_for_update().get(pk=complaint.pk)
                locked.set()
                release.wait(WAIT)
        finally:
            connections["default"].close()

    holder = Worker(hold_row, name="holder")
    holder.start()
    assert locked.wait(WAIT)
    barrier = threading.Barrier(2)
    changes = {"alice": (alice, S.IN_PROGRESS, ""), "bob": (bob, S.RESOLVED, NOTE)}
    posts = [
        Worker(
            lambda user=user, to=to, note=note: post_status(user, complaint, S.ASSIGNED, to, note),
            barrier=barrier,
            name=name,
        )
        for name, (user, to, note) in changes.items()
    ]
    for post in posts:
        post.start()
    wait_until(lambda: waiting_on_locks() == 2, what="both UPDATEs to wait on the row lock")
    release.set()

    outcomes = {post.name: post.outcome().status_code for post in posts}
    assert holder.outcome() is None
    assert sorted(outcomes.values()) == [303, 409]
    [winner] = [name for name, code in outcomes.items() if code == 303]
    complaint.refresh_from_db()
    assert complaint.status == changes[winner][1]
    [event] = ComplaintEvent.objects.filter(complaint=complaint)
    assert (event.actor_label, event.from_status) == (winner, S.ASSIGNED)


def waiting_on_locks() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


# --- refusals: tenant, permission, bad input, GET ----------------------------------------


def test_tenant_and_permission_refusals_write_nothing(complaint, oak, alice, mallory, viewer):
    oak_complaint = Complaint.objects.create(organization=oak, title="Oak gate")
    before, before_oak = written(complaint), written(oak_complaint)
    data = {"from_status": S.OPEN, "to_status": S.CLOSED, "note": "spam"}

    for name in ("status", "note", "sla"):
        # Oak's complaint under Maple's URL; Maple's complaint for Oak's staff: 404.
        oak_under_maple = url(name, oak_complaint, slug="maple-court")
        assert client_for(alice).post(oak_under_maple, data).status_code == 404
        assert client_for(mallory).post(url(name, complaint), data).status_code == 404
        # Staff of Maple without hoa.change_complaint: 403.
        assert client_for(viewer).post(url(name, complaint), data).status_code == 403
        assert Client().post(url(name, complaint), data).status_code == 302  # to the login

    assert written(complaint) == before and written(oak_complaint) == before_oak
    reasons = AccessDenial.objects.values_list("reason", flat=True)
    assert sorted(set(reasons)) == ["permission", "tenant"]


def test_the_viewer_sees_the_complaint_without_the_workflow_forms(complaint, viewer):
    html = client_for(viewer).get(url("complaint", complaint)).content.decode()
    assert 'name="to_status"' not in html and 'name="due_at"' not in html
    assert 'data-testid="timeline"' in html or "Nothing has happened" in html


@pytest.mark.parametrize(
    ("data", "sentence"),
    [
        ({"to_status": S.CLOSED, "note": "x"}, "This page was out of date."),
        ({"from_status": "nope", "to_status": S.CLOSED}, "This page was out of date."),
        ({"from_status": S.OPEN, "to_status": "reopened"}, "Choose a status from the list."),
        ({"from_status": S.OPEN}, "Choose the new status."),
        ({"from_status": S.OPEN, "to_status": "<script>"}, "Choose a status from the list."),
    ],
)
def test_bad_input_is_400_with_a_sentence_and_writes_nothing(complaint, alice, data, sentence):
    before = written(complaint)

    response = client_for(alice).post(url("status", complaint), data)

    assert response.status_code == 400
    html = response.content.decode()
    assert sentence in html and "<script>" not in html
    assert written(complaint) == before


@pytest.mark.parametrize("name", ["status", "note", "sla"])
def test_a_get_on_a_post_endpoint_goes_to_the_complaint(complaint, alice, name):
    response = client_for(alice).get(url(name, complaint))

    assert response.status_code == 303
    assert response["Location"] == url("complaint", complaint)


def test_csrf_is_enforced_on_status_changes(complaint, alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    before = written(complaint)

    response = client.post(url("status", complaint), {"from_status": "open", "to_status": "closed"})

    assert response.status_code == 403
    assert written(complaint) == before


# --- notes and SLA changes ---------------------------------------------------------------


def test_a_note_is_recorded_with_its_author_and_a_blank_one_is_400(complaint, alice):
    client = client_for(alice)

    assert (
        client.post(url("note", complaint), {"note": "  Called the tenant.  "}).status_code == 303
    )
    before = written(complaint)
    refused = client.post(url("note", complaint), {"note": "   "})

    assert refused.status_code == 400
    assert "Write the note first." in refused.content.decode()
    assert written(complaint) == before
    note = ComplaintEvent.objects.get(complaint=complaint)
    assert (note.kind, note.detail, note.actor) == ("note", "Called the tenant.", alice)


def seen_due(complaint) -> dict:
    """The SLA due time a page of ``complaint`` shows now, as its form carries it."""
    due = Complaint.objects.get(pk=complaint.pk).sla_due_at
    return {"seen_due": int(due.timestamp()) if due else 0}


def test_changing_the_sla_is_recorded_with_old_and_new_due_times_and_the_reason(complaint, alice):
    old = complaint.sla_due_at
    new = timezone.localtime(old + timedelta(days=2)).replace(second=0, microsecond=0)

    response = client_for(alice).post(
        url("sla", complaint),
        {"due_at": f"{new:%Y-%m-%dT%H:%M}", "reason": "Parts on order", **seen_due(complaint)},
        follow=True,
    )

    assert response.redirect_chain == [(url("complaint", complaint), 303)]
    complaint.refresh_from_db()
    assert complaint.sla_due_at == new
    event = ComplaintEvent.objects.get(complaint=complaint)
    assert (event.kind, event.old_due_at, event.new_due_at) == ("sla_changed", old, new)
    assert (event.actor, event.detail) == (alice, "Parts on order")
    # One date-time format on every page: in the association's zone, with its abbreviation.
    assert f"SLA due {timezone.localtime(old):%Y-%m-%d %H:%M %Z} → {new:%Y-%m-%d %H:%M %Z}" in (
        re.sub(r"<[^>]+>", "", response.content.decode())
    )


@pytest.mark.parametrize(
    ("status", "data", "sentence"),
    [
        (S.OPEN, {"due_at": "2030-01-01T10:00"}, "Say why the SLA due time changes."),
        (S.OPEN, {"due_at": "2030-01-01T10:00", "reason": "   "}, "Say why the SLA due time"),
        (S.OPEN, {"due_at": "tomorrow", "reason": "x"}, "as a date and a time"),
        (S.OPEN, {"due_at": "2000-01-01T10:00", "reason": "x"}, "must be after the complaint"),
        (S.CLOSED, {"due_at": "2030-01-01T10:00", "reason": "x"}, "has no SLA running"),
    ],
)
def test_bad_sla_changes_are_400_and_write_nothing(complaint, alice, status, data, sentence):
    given(complaint, status)
    before = written(complaint)

    response = client_for(alice).post(url("sla", complaint), {**data, **seen_due(complaint)})

    assert response.status_code == 400
    assert sentence in response.content.decode()
    assert written(complaint) == before


def test_an_sla_change_posted_from_a_page_older_than_another_change_is_409(complaint, alice):
    """Two people moved the SLA from the same page: the second is told what it is now, and
    the first one's change stays."""
    page = seen_due(complaint)
    first = timezone.localtime(complaint.sla_due_at + timedelta(days=2)).replace(second=0)
    second = first + timedelta(days=1)
    done = client_for(alice).post(
        url("sla", complaint), {"due_at": f"{first:%Y-%m-%dT%H:%M}", "reason": "a", **page}
    )
    assert done.status_code == 303

    stale = client_for(alice).post(
        url("sla", complaint), {"due_at": f"{second:%Y-%m-%dT%H:%M}", "reason": "b", **page}
    )

    assert stale.status_code == 409
    assert "was changed since you looked" in stale.content.decode()
    complaint.refresh_from_db()
    assert complaint.sla_due_at == first.replace(microsecond=0)


def test_the_admin_cannot_edit_the_sla_clock_or_the_status(client, complaint, root):
    before = written(complaint)
    client.force_login(root)
    change = reverse("admin:hoa_complaint_change", args=[complaint.pk])
    page = client.get(change)
    form = page.context["adminform"].form

    assert not {"opened_at", "sla_due_at", "status"} & set(form.fields)
    response = client.post(
        change,
        {
            "organization": complaint.organization_id,
            "unit": complaint.unit_id,
            "title": "Leaking pipe",
            "priority": "high",
            "status": "closed",
            "opened_at_0": "2000-01-01",
            "opened_at_1": "00:00:00",
            "sla_due_at_0": "2099-01-01",
            "sla_due_at_1": "00:00:00",
            "events-TOTAL_FORMS": "0",
            "events-INITIAL_FORMS": "0",
            "assignments-TOTAL_FORMS": "0",
            "assignments-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert written(complaint) == before


# --- the timeline ------------------------------------------------------------------------


@fenced
def test_the_timeline_merges_assignments_status_changes_and_notes_newest_first(
    complaint, pipe, alice
):
    client = client_for(alice)
    assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    client.post(url("note", complaint), {"note": "Tenant away until Monday."})
    post_status(alice, complaint, S.ASSIGNED, S.IN_PROGRESS)
    post_status(alice, complaint, S.IN_PROGRESS, S.RESOLVED, NOTE)

    page = client.get(url("complaint", complaint))

    kinds = [
        (e.kind, e.item.to_status if e.kind == "status_changed" else "")
        for e in page.context["timeline"]
    ]
    assert kinds == [
        ("status_changed", S.RESOLVED),
        ("status_changed", S.IN_PROGRESS),
        ("note", ""),
        ("status_changed", S.ASSIGNED),
        ("assignment", ""),
    ]
    html = page.content.decode()
    assert html.index("In progress → Resolved") < html.index("Tenant away until Monday.")
    assert html.index("Tenant away until Monday.") < html.index("Pipe Pros assigned</b>")


@pytest.fixture
def nothing_assigns():
    """The registry as a project with no assigning app has it: no operation declares the
    workflow's ``AssignmentGuard`` (restored afterwards)."""
    with pages_removed(
        lambda pages: pages.complaints and pages.complaints.assignment_guard
    ) as guarding:
        assert guarding, "control: an installed operation declares the guard"
        yield


def test_without_an_assigning_operation_no_status_waits_for_an_assignee(
    complaint, alice, nothing_assigns
):
    """The workflow names no app: "in progress needs a vendor" is vendors' guard (a
    resolved complaint without a vendor cannot go back to work while it is installed, see
    RULES); without it, nothing waits for an assignee: back to work is offered and done."""
    given(complaint, S.RESOLVED)
    assert assigned(complaint) is None
    page = client_for(alice).get(url("complaint", complaint))
    offered = [v for v, _ in page.context["status_form"].fields["to_status"].widget.choices if v]
    assert offered == [S.CLOSED, S.IN_PROGRESS, S.OPEN]

    response = post_status(alice, complaint, S.RESOLVED, S.IN_PROGRESS, "It leaks again.")

    assert response.status_code == 303
    complaint.refresh_from_db()
    assert complaint.status == S.IN_PROGRESS
