"""Staff pages: complaints, the assign form and its answers (303 / 409 / 400 / 403 / 404)."""

import re
import threading
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from hoa.models import Complaint, StaffMembership
from locking.models import FenceEvent
from tests.harness.waiting import wait_until
from tests.vendors_support import (
    Worker,
    active_assignments,
    active_vendor,
    state_of,
    vendor_with_contract,
)
from vendors.models import VendorAssignment
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

# Pages and refusals run inside the test's transaction; tests that reach run_fenced (which
# opens its own transactions) are marked ``fenced``.
pytestmark = pytest.mark.django_db
fenced = pytest.mark.django_db(transaction=True)


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(
        organization=maple, unit=maple.units.first(), title="Leaking pipe", priority="high"
    )


@pytest.fixture
def oak_complaint(oak):
    return Complaint.objects.create(organization=oak, title="Oak gate")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def assign_url(complaint, slug=None) -> str:
    return reverse("vendors:assign", args=[slug or complaint.organization.slug, complaint.pk])


def detail_url(complaint, slug=None) -> str:
    return reverse("complaints:complaint", args=[slug or complaint.organization.slug, complaint.pk])


# --- Pages -------------------------------------------------------------------------------


@fenced
def test_complaint_list_shows_status_sla_and_current_vendor(
    maple, complaint, oak_complaint, pipe, alice
):
    Complaint.objects.filter(pk=complaint.pk).update(sla_breached_at=timezone.now())
    quiet = Complaint.objects.create(organization=maple, title="Flickering light")
    assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    page = client_for(alice).get(reverse("complaints:complaints", args=["maple-court"]))

    assert page.status_code == 200
    rows = {c.pk: c for c in page.context["complaints"]}
    assert set(rows) == {complaint.pk, quiet.pk}  # not Oak Ridge's
    assert rows[complaint.pk].current_vendor_name == "Pipe Pros"
    assert rows[quiet.pk].current_vendor_name is None
    html = page.content.decode()
    assert "Leaking pipe" in html and "Oak gate" not in html
    assert "breached" in html and "unassigned" in html
    assert complaint.sla_due_at.strftime("%Y-%m-%d") in html


def test_pages_need_a_login_and_membership(maple, complaint, mallory):
    anonymous = Client().get(reverse("complaints:complaints", args=["maple-court"]))
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(reverse("login"))

    other = client_for(mallory)
    for url in (
        reverse("complaints:complaints", args=["maple-court"]),
        reverse("vendors:vendors", args=["maple-court"]),
        detail_url(complaint),
    ):
        assert other.get(url).status_code == 404


@fenced
def test_complaint_detail_offers_only_vendors_under_contract_today(
    maple, oak, complaint, pipe, green, alice
):
    vendor_with_contract("Bright Spark", maple, starts_in_days=-90, ends_in_days=-1)
    vendor_with_contract("Summit", maple, starts_in_days=5, ends_in_days=90)
    active_vendor("Oakline", oak)
    assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    page = client_for(alice).get(detail_url(complaint))

    assert page.status_code == 200
    offered = [label for value, label in page.context["form"].fields["vendor"].choices if value]
    assert offered == ["Evergreen (plumbing)", "Pipe Pros (plumbing)"]
    assert page.context["current"].vendor == pipe
    assert [a.vendor for a in page.context["history"]] == [pipe]
    html = page.content.decode()
    # Reassigning is choosing another vendor: the page carries the one it shows, no box.
    assert 'name="reassign"' not in html
    assert f'name="replacing" value="{page.context["current"].pk}"' in html
    assert 'action="' + assign_url(complaint) + '"' in html


@fenced
def test_the_complaint_page_reads_the_assignments_once(
    complaint, pipe, green, alice, django_assert_max_num_queries
):
    # The vendor card (the active assignment), the invoices (whether any vendor was
    # assigned), the status menu (whether one is now) and the timeline (every assignment)
    # share one read of the assignments. Counted as CaptureQueriesContext counts them: user,
    # organization with the membership, complaint, assignments, permissions (one UNION),
    # invoices, events, reporter emails, insurance lapses, the vendor menu. The session
    # comes from Redis (hoa/sessions.py).
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    assign_vendor(complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=first)
    client = client_for(alice)

    with django_assert_max_num_queries(10) as statements:
        page = client.get(detail_url(complaint))

    assert page.status_code == 200
    assert page.context["current"].vendor == green
    assert [a.vendor for a in page.context["history"]] == [green, pipe]
    assert "Record an invoice" in page.content.decode()
    assignments = [s for s in statements if 'FROM "vendors_vendorassignment"' in s["sql"]]
    assert len(assignments) == 1
    assert [e.kind for e in page.context["timeline"]].count("assignment") == 2


def test_complaint_of_another_association_is_404_even_under_this_associations_url(
    complaint, oak_complaint, alice
):
    client = client_for(alice)

    assert client.get(detail_url(oak_complaint, slug="maple-court")).status_code == 404
    assert client.get(detail_url(oak_complaint)).status_code == 404  # not her association


def test_viewer_sees_the_complaint_without_the_assign_form(complaint, viewer):
    page = client_for(viewer).get(detail_url(complaint))

    assert page.status_code == 200
    assert 'name="vendor"' not in page.content.decode()


def test_vendor_list_shows_contract_windows_for_this_association(maple, oak, alice, mallory):
    active_vendor("Pipe Pros", maple)
    vendor_with_contract("Bright Spark", maple, starts_in_days=-90, ends_in_days=-1)
    vendor_with_contract("Summit", maple, starts_in_days=5, ends_in_days=90)
    active_vendor("Oakline", oak)

    page = client_for(alice).get(reverse("vendors:vendors", args=["maple-court"]))

    assert page.status_code == 200
    assert [c.vendor.name for c in page.context["contracts"]] == [
        "Bright Spark",
        "Pipe Pros",
        "Summit",
    ]
    html = page.content.decode()
    assert "Oakline" not in html
    assert html.count("badge good") == 1 and "ended" in html and "not started" in html
    today = timezone.localdate()
    assert (today - timedelta(days=90)).isoformat() in html


# --- Assigning ---------------------------------------------------------------------------


@fenced
def test_assign_redirects_303_to_the_complaint_with_a_message(complaint, pipe, alice, dispatch):
    client = client_for(alice)

    response = client.post(assign_url(complaint), {"vendor": pipe.pk})

    assert response.status_code == 303
    assert response["Location"] == detail_url(complaint)
    page = client.get(response["Location"])
    assert f"Pipe Pros is assigned to complaint #{complaint.pk}." in page.content.decode()
    [active] = active_assignments(complaint)
    assert (active.vendor, active.assigned_by, active.fence_token) == (pipe, alice, 1)
    assert FenceEvent.objects.get().ip == "127.0.0.1"
    assert dispatch.received[0].token == 1


def shown_assignment(page) -> str:
    """The value of the form's hidden ``replacing`` field: the assignment the page shows."""
    [field] = re.findall(r'<input type="hidden" name="replacing"[^>]*>', page.content.decode())
    value = re.search(r'value="([^"]*)"', field)
    return value.group(1) if value else ""


@fenced
def test_the_assign_form_carries_the_assignment_the_page_shows(complaint, pipe, alice):
    client = client_for(alice)
    assert shown_assignment(client.get(detail_url(complaint))) == ""  # no vendor yet

    assignment = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment

    assert shown_assignment(client.get(detail_url(complaint))) == str(assignment.pk)


@fenced
def test_the_form_replaces_the_vendor_it_showed_with_no_box_to_tick(
    complaint, pipe, green, alice, dispatch
):
    client = client_for(alice)
    client.post(assign_url(complaint), {"vendor": pipe.pk})
    shown = shown_assignment(client.get(detail_url(complaint)))

    response = client.post(assign_url(complaint), {"vendor": green.pk, "replacing": shown})

    assert response.status_code == 303
    assert [a.vendor for a in active_assignments(complaint)] == [green]
    assert VendorAssignment.objects.filter(active=False).get().pk == int(shown)
    assert dispatch.received[1].json["replacing"] == {"assignment": int(shown), "vendor": pipe.pk}


@fenced
def test_reassign_posted_without_the_field_replaces_the_vendor_active_at_the_request(
    complaint, pipe, green, alice
):
    # A client that showed no page (a script, not the form) is treated like the command.
    client = client_for(alice)
    client.post(assign_url(complaint), {"vendor": pipe.pk})

    response = client.post(assign_url(complaint), {"vendor": green.pk, "reassign": "on"})

    assert response.status_code == 303
    assert [a.vendor for a in active_assignments(complaint)] == [green]


@fenced
def test_reassign_from_a_page_that_showed_a_replaced_vendor_is_409_naming_the_new_one(
    maple, complaint, pipe, green, alice, dispatch, redis_client
):
    bright = active_vendor("Bright Spark", maple)
    client = client_for(alice)
    client.post(assign_url(complaint), {"vendor": pipe.pk})
    shown = shown_assignment(client.get(detail_url(complaint)))  # the page shows Pipe Pros
    # Meanwhile someone else replaces Pipe Pros with Evergreen.
    theirs = assign_vendor(
        complaint=complaint,
        vendor=green,
        actor=alice,
        reassign=True,
        replacing=VendorAssignment.objects.get(pk=shown),
    ).assignment
    before = state_of(complaint, redis_client)

    response = client.post(assign_url(complaint), {"vendor": bright.pk, "replacing": shown})

    assert response.status_code == 409
    html = response.content.decode()
    assert "<h1>Changed since you looked</h1>" in html
    assert (
        "Nothing was changed: since you looked, Evergreen has been assigned. Try again to "
        "replace Evergreen with Bright Spark knowingly."
    ) in html
    assert "Current vendor: Evergreen, assigned by alice on " in html
    # The retry replaces the vendor this page has now shown.
    assert f'<input type="hidden" name="vendor" value="{bright.pk}">' in html
    assert f'<input type="hidden" name="replacing" value="{theirs.pk}">' in html
    assert 'name="reassign"' not in html and ">Assign Bright Spark instead</button>" in html
    assert state_of(complaint, redis_client) == before
    assert FenceEvent.objects.order_by("-id").values_list("outcome", "token").first() == (
        "conflict",
        3,
    )
    assert len(dispatch.received) == 2  # Bright Spark was never called

    retried = client.post(assign_url(complaint), {"vendor": bright.pk, "replacing": theirs.pk})

    assert retried.status_code == 303
    assert [(a.vendor, a.fence_token) for a in active_assignments(complaint)] == [(bright, 4)]


@fenced
@pytest.mark.parametrize("value", ["abc", "-1", "99999999999999999999", "987654", "{other}"])
def test_a_malformed_or_foreign_shown_assignment_is_400_and_writes_nothing(
    maple, complaint, pipe, green, alice, redis_client, dispatch, value
):
    assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    other = Complaint.objects.create(organization=maple, title="Other")
    foreign = assign_vendor(complaint=other, vendor=pipe, actor=alice).assignment
    before = state_of(complaint, redis_client)

    response = client_for(alice).post(
        assign_url(complaint),
        {"vendor": green.pk, "reassign": "on", "replacing": value.format(other=foreign.pk)},
    )

    assert response.status_code == 400
    assert response.context["form"].errors["replacing"] == [
        "This page was out of date. Reload it and choose again."
    ]
    assert "This page was out of date." in response.content.decode()
    assert state_of(complaint, redis_client) == before
    assert len(dispatch.received) == 2  # the two assignments above


@fenced
def test_same_vendor_again_is_a_303_saying_it_is_already_done(complaint, pipe, alice):
    client = client_for(alice)
    client.post(assign_url(complaint), {"vendor": pipe.pk})

    response = client.post(assign_url(complaint), {"vendor": pipe.pk}, follow=True)

    assert response.redirect_chain == [(detail_url(complaint), 303)]
    assert "Pipe Pros is already the vendor" in response.content.decode()
    assert VendorAssignment.objects.count() == 1


@fenced
def test_another_vendor_without_reassign_is_409_naming_the_winner(
    complaint, pipe, green, alice, redis_client
):
    client = client_for(alice)
    client.post(assign_url(complaint), {"vendor": pipe.pk})
    before = state_of(complaint, redis_client)

    response = client.post(assign_url(complaint), {"vendor": green.pk})

    assert response.status_code == 409
    html = response.content.decode()
    assert "Current vendor: Pipe Pros, assigned by alice on " in html
    assert f'<input type="hidden" name="vendor" value="{green.pk}">' in html
    assert f'action="{assign_url(complaint)}"' in html and 'name="reassign"' not in html
    assert ">Assign Evergreen instead</button>" in html
    # The button on this page replaces the vendor it names, knowingly.
    [winner] = active_assignments(complaint)
    assert f'<input type="hidden" name="replacing" value="{winner.pk}">' in html
    assert state_of(complaint, redis_client) == before


@fenced
def test_busy_lease_is_409_naming_the_holder_with_a_retry_button(
    complaint, pipe, alice, fence_lock, redis_client
):
    held = fence_lock.acquire(
        assignment_resource(complaint.pk), ttl=timedelta(seconds=30), holder="bob"
    )
    before = state_of(complaint, redis_client)

    response = client_for(alice).post(assign_url(complaint), {"vendor": pipe.pk})

    assert response.status_code == 409
    assert response.context["busy"].holder.startswith("bob on ")
    html = response.content.decode()
    assert "Being done right now" in html and "Try again" in html
    assert f'<input type="hidden" name="vendor" value="{pipe.pk}">' in html
    assert state_of(complaint, redis_client) == before
    held.release()


@fenced
def test_the_busy_409_of_a_first_assignment_offers_no_replacing(complaint, pipe, alice, fence_lock):
    """The page showed no vendor: its retry is the same first assignment, with nothing to
    replace (it offered "Replace the current vendor" although there was none)."""
    fence_lock.acquire(assignment_resource(complaint.pk), ttl=timedelta(seconds=30))

    response = client_for(alice).post(assign_url(complaint), {"vendor": pipe.pk, "replacing": ""})

    assert response.status_code == 409
    html = response.content.decode()
    assert "Replace" not in html and 'name="reassign"' not in html
    assert '<input type="hidden" name="replacing" value="">' in html
    assert ">Try again</button>" in html


@pytest.mark.parametrize(
    "value",
    [
        "abc",
        "-1",
        "",
        "1.5",
        "99999999999999999999",
        "987654",
        "<script>",
        "{oak}",
        "{none}",
        "{wide}",  # pipe's own id in fullwidth digits: int() would read it as pipe
        " {pipe} ",
    ],
)
def test_bad_or_foreign_vendor_is_400_and_writes_nothing(
    complaint, oak, pipe, alice, redis_client, dispatch, value
):
    wide = str(pipe.pk).translate({ord(d): 0xFF10 + int(d) for d in "0123456789"})
    values = {"oak": active_vendor("Oakline", oak).pk, "none": "", "wide": wide, "pipe": pipe.pk}
    posted = {"vendor": value.format(**values)} if value != "{none}" else {}
    before = state_of(complaint, redis_client)

    response = client_for(alice).post(assign_url(complaint), posted)

    assert response.status_code == 400
    errors = response.context["form"].errors["vendor"]
    assert errors in (
        ["Choose a vendor that has a contract with this association."],
        ["Choose a vendor."],
    )
    assert "<script>" not in response.content.decode()
    assert state_of(complaint, redis_client) == before
    assert before.redis_keys == ()
    assert dispatch.received == []


@pytest.mark.parametrize(
    ("starts", "ends", "message"),
    [
        (-90, -1, "contract with Maple Court ended on"),
        (3, 90, "contract with Maple Court starts on"),
    ],
    ids=["ended", "future"],
)
def test_vendor_whose_contract_does_not_cover_today_is_400_with_its_dates(
    maple, complaint, alice, redis_client, starts, ends, message
):
    vendor = vendor_with_contract("Bright Spark", maple, starts_in_days=starts, ends_in_days=ends)
    before = state_of(complaint, redis_client)

    response = client_for(alice).post(assign_url(complaint), {"vendor": vendor.pk})

    assert response.status_code == 400
    assert message in response.content.decode()
    assert state_of(complaint, redis_client) == before
    assert before.redis_keys == ()


def test_refusals_by_tenant_and_permission_write_nothing(
    complaint, oak_complaint, pipe, alice, mallory, viewer, redis_client
):
    before = state_of(complaint, redis_client)
    before_oak = state_of(oak_complaint, redis_client)

    # Oak's complaint id under Maple's URL, and Maple's complaint for Oak's staff: 404.
    assert (
        client_for(alice)
        .post(assign_url(oak_complaint, slug="maple-court"), {"vendor": pipe.pk})
        .status_code
        == 404
    )
    assert client_for(mallory).post(assign_url(complaint), {"vendor": pipe.pk}).status_code == 404
    assert (
        client_for(mallory)
        .post(assign_url(complaint, slug="oak-ridge"), {"vendor": pipe.pk})
        .status_code
        == 404
    )
    # Staff of Maple without vendors.assign_vendor: 403.
    assert client_for(viewer).post(assign_url(complaint), {"vendor": pipe.pk}).status_code == 403
    # Anonymous: to the login page.
    assert Client().post(assign_url(complaint), {"vendor": pipe.pk}).status_code == 302

    assert state_of(complaint, redis_client) == before
    assert state_of(oak_complaint, redis_client) == before_oak
    assert FenceEvent.objects.count() == 0


def test_permission_without_membership_is_still_404(complaint, pipe, nobody):
    assert client_for(nobody).post(assign_url(complaint), {"vendor": pipe.pk}).status_code == 404


def test_csrf_is_enforced_on_assign(complaint, pipe, alice, redis_client):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    before = state_of(complaint, redis_client)

    response = client.post(assign_url(complaint), {"vendor": pipe.pk})

    assert response.status_code == 403
    assert state_of(complaint, redis_client) == before


def test_assign_changes_nothing_but_on_post(complaint, alice):
    client = client_for(alice)
    assert client.put(assign_url(complaint)).status_code == 405
    assert not VendorAssignment.objects.exists()


@fenced
def test_dispatch_failure_is_502_and_writes_nothing(complaint, pipe, alice, dispatch, redis_client):
    dispatch.status = 422
    before = state_of(complaint, redis_client)

    response = client_for(alice).post(assign_url(complaint), {"vendor": pipe.pk})

    assert response.status_code == 502
    assert "HTTP 422" in response.content.decode()
    after = state_of(complaint, redis_client)
    assert (after.assignments, after.fence_token) == (before.assignments, before.fence_token)


@fenced
def test_redis_down_is_503_and_writes_nothing(complaint, pipe, alice, settings):
    settings.LOCK_REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there

    response = client_for(alice).post(assign_url(complaint), {"vendor": pipe.pk})

    assert response.status_code == 503
    assert VendorAssignment.objects.count() == 0
    assert FenceEvent.objects.get().outcome == "unavailable"


@fenced
def test_two_staff_posting_at_once_one_gets_303_the_other_409_naming_the_holder(
    maple, complaint, pipe, green, alice, staff_permissions, django_user_model, dispatch
):
    bob = django_user_model.objects.create_user(username="bob", password="pw-bob")
    bob.groups.add(staff_permissions)
    StaffMembership.objects.create(user=bob, organization=maple)
    gate = dispatch.hold()
    barrier = threading.Barrier(2)
    posts = [
        Worker(
            lambda user=user, vendor=vendor: client_for(user).post(
                assign_url(complaint), {"vendor": vendor.pk}
            ),
            barrier=barrier,
            name=user.username,
        )
        for user, vendor in ((alice, pipe), (bob, green))
    ]
    for post in posts:
        post.start()

    gate.wait_arrived(1)  # the winner holds the lease inside its dispatch call
    wait_until(lambda: any(p.finished.is_set() for p in posts), what="the loser's page")
    [loser] = [p for p in posts if p.finished.is_set()]
    [winner] = [p for p in posts if p is not loser]
    gate.release()

    assert winner.outcome().status_code == 303
    lost = loser.outcome()
    assert lost.status_code == 409
    page = lost.content.decode()
    # The person's name only: the holder label's host and pid are for operators.
    assert (
        f"Another staff member ({winner.name}) is assigning a vendor to complaint "
        f"#{complaint.pk}; this usually takes a few seconds."
    ) in page
    assert f"{winner.name} on " not in page and " pid " not in page
    [active] = active_assignments(complaint)
    assert active.assigned_by.username == winner.name
    assert VendorAssignment.objects.count() == 1


# Refused by the fence (the dispatch service accepted the paused call, its answer came back
# late) or by its receiver (the paused call arrived after the newer assignment's, which the
# dispatch service fences per complaint).
@fenced
@pytest.mark.parametrize("answered", [True, False], ids=["fence", "receiver"])
def test_paused_holder_posting_is_answered_409_naming_the_newer_assignment(
    complaint, pipe, green, alice, dispatch, redis_client, settings, answered
):
    # Long enough for the claim and the look before the call on a loaded machine (a lease
    # that runs out before its call stops there, and nothing reaches the gate).
    settings.VENDOR_LOCK_TTL_SECONDS = 1.0
    gate = dispatch.hold(lambda request: request.json["vendor"]["id"] == pipe.pk, answered=answered)
    paused = Worker(lambda: client_for(alice).post(assign_url(complaint), {"vendor": pipe.pk}))
    paused.start()
    gate.wait_arrived(1)
    lease = f"lock:{{{assignment_resource(complaint.pk)}}}"
    wait_until(lambda: not redis_client.exists(lease), what="the lease to expire")
    assert (
        client_for(alice)
        .post(assign_url(complaint), {"vendor": green.pk, "reassign": "on"})
        .status_code
        == 303
    )
    gate.release()

    late = paused.outcome()

    assert late.status_code == 409
    html = late.content.decode()
    assert "Someone else took over" in html
    assert (
        f"Someone else took over assigning a vendor to complaint #{complaint.pk} while this "
        "attempt was waiting; nothing of this attempt was saved."
    ) in html
    assert "Current vendor: Evergreen, assigned by alice on " in html
    assert "token" not in html.replace("csrfmiddlewaretoken", "")
    assert [(a.vendor, a.fence_token) for a in active_assignments(complaint)] == [(green, 2)]
    assert VendorAssignment.objects.count() == 1
    paused_call = next(r for r in dispatch.received if r.token == 1)
    assert (paused_call.status, paused_call.verdict) == (
        (200, "accepted") if answered else (409, "stale")
    )


def test_get_on_the_assign_url_leads_to_the_complaint(complaint, alice):
    """Entering a 409 page's address again must not show the browser's bare 405."""
    response = client_for(alice).get(assign_url(complaint))
    assert (response.status_code, response["Location"]) == (302, detail_url(complaint))


@fenced
def test_a_reassigning_post_runs_at_most_twelve_sql_statements(
    complaint, pipe, green, alice, django_assert_max_num_queries
):
    # Counted as CaptureQueriesContext counts them, BEGIN and COMMIT included: user,
    # organization with the membership, permissions (one UNION: hoa/security/permissions.py),
    # complaint with its organization, the form's vendor and replacing, contract, the
    # claim (committed on its own before the dispatch call), look, BEGIN, the fence with
    # the audit row (one statement), the compare-and-swap that deactivates the replaced
    # assignment and inserts the new one, COMMIT. The session comes from Redis
    # (hoa/sessions.py), and a complaint that is already assigned costs no status statement.
    client = client_for(alice)
    shown = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment.pk
    form = {"vendor": green.pk, "reassign": "on", "replacing": shown}

    with django_assert_max_num_queries(12):
        response = client.post(assign_url(complaint), form)

    assert response.status_code == 303
    assert [a.vendor for a in active_assignments(complaint)] == [green]
