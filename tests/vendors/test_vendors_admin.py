"""The Complaint admin: "Assign vendor…" with its intermediate form, and the history."""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from hoa.models import Complaint
from locking.models import FenceEvent
from tests.vendors_support import (
    Worker,
    active_assignments,
    active_vendor,
    cancellations,
    dispatch_of,
    shown_assignments,
    start_overtaking_reassignment,
    state_of,
    vendor_with_contract,
)
from vendors.models import VendorAssignment
from vendors.services import assign_vendor

# The intermediate form renders inside the test's transaction; applying it reaches
# run_fenced, which opens its own transactions, so those tests are marked ``fenced``.
pytestmark = pytest.mark.django_db
fenced = pytest.mark.django_db(transaction=True)

CHANGELIST = reverse("admin:hoa_complaint_changelist")


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Leaking pipe")


def admin_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def run_action(client, complaints, **fields):
    """Post the action; follow the redirect so that the changelist shows (and consumes)
    the messages."""
    data = {"action": "assign_vendor", "_selected_action": [c.pk for c in complaints], **fields}
    if "apply" in fields and "shown" not in fields:  # as the page showed them now
        data.update(shown_assignments(complaints))
    return client.post(CHANGELIST, data, follow=True)


def texts(response) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def action_names(response) -> list[str]:
    form = response.context["action_form"]  # None when the user has no action at all
    return [name for name, _ in form.fields["action"].choices] if form else []


def test_intermediate_form_lists_only_vendors_under_contract_today(
    maple, oak, complaint, pipe, green, alice
):
    vendor_with_contract("Bright Spark", maple, starts_in_days=-90, ends_in_days=-1)
    vendor_with_contract("Summit", maple, starts_in_days=5, ends_in_days=90)
    active_vendor("Oakline", oak)

    page = run_action(admin_client(alice), [complaint])

    assert page.status_code == 200
    offered = [label for value, label in page.context["form"].fields["vendor"].choices if value]
    assert offered == ["Evergreen (plumbing)", "Pipe Pros (plumbing)"]
    html = page.content.decode()
    assert f'name="_selected_action" value="{complaint.pk}"' in html
    assert 'name="apply"' in html
    assert VendorAssignment.objects.count() == 0


@fenced
def test_applying_assigns_each_selected_complaint_with_a_success_message(
    maple, complaint, pipe, alice
):
    second = Complaint.objects.create(organization=maple, title="Broken gate")

    done = run_action(admin_client(alice), [complaint, second], apply="1", vendor=pipe.pk)

    assert done.redirect_chain == [(CHANGELIST, 302)]
    assert sorted(texts(done)) == sorted(
        [
            ("success", f"Pipe Pros is assigned to complaint #{complaint.pk}."),
            ("success", f"Pipe Pros is assigned to complaint #{second.pk}."),
        ]
    )
    assert [a.vendor for a in active_assignments(complaint)] == [pipe]
    assert [a.vendor for a in active_assignments(second)] == [pipe]
    assert {a.actor_label for a in VendorAssignment.objects.all()} == {"alice"}


@fenced
def test_another_vendor_without_reassign_is_a_warning_and_reassign_replaces_it(
    complaint, pipe, green, alice, redis_client
):
    client = admin_client(alice)
    run_action(client, [complaint], apply="1", vendor=pipe.pk)
    before = state_of(complaint, redis_client)

    refused = run_action(client, [complaint], apply="1", vendor=green.pk)
    after_refusal = state_of(complaint, redis_client)
    replaced = run_action(client, [complaint], apply="1", vendor=green.pk, reassign="on")

    [(level, text)] = texts(refused)
    assert level == "warning"
    assert text.startswith(f"Complaint #{complaint.pk} already has a vendor: Pipe Pros")
    assert after_refusal == before
    [(level, text)] = texts(replaced)
    assert (level, text.split(",")[0]) == (
        "success",
        f"Evergreen now handles complaint #{complaint.pk}",
    )
    assert [a.vendor for a in active_assignments(complaint)] == [green]


@fenced
def test_a_rival_paused_in_its_dispatch_is_refused_once_the_action_claimed_and_it_wins(
    maple, complaint, pipe, green, alice, dispatch, redis_client, settings
):
    """The action reads the vendor to replace (Pipe Pros) before the lease; a rival, paused
    in its dispatch past its lease, comes back after the action claimed and called: the
    rival is refused, and the action replaces Pipe Pros and says so."""
    settings.VENDOR_LOCK_TTL_SECONDS = 0.3
    bright = active_vendor("Bright Spark", maple)
    shown = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    rival, rival_gate = start_overtaking_reassignment(
        dispatch, redis_client, complaint=complaint, vendor=green, replacing=shown, actor=alice
    )
    action_gate = dispatch.hold(dispatch_of(bright))
    action = Worker(
        lambda: run_action(
            admin_client(alice), [complaint], apply="1", vendor=bright.pk, reassign="on"
        )
    )
    action.start()
    action_gate.wait_arrived(1)  # the action looked, claimed token 3, called Bright Spark
    rival_gate.release()
    lost = rival.outcome()  # the older holder comes back first: refused
    action_gate.release()
    answered = action.outcome()

    assert (type(lost).__name__, lost.token, lost.recorded) == ("Superseded", 2, 3)
    assert answered.redirect_chain == [(CHANGELIST, 302)]
    [(level, text)] = texts(answered)
    assert level == "success" and text.startswith(
        f"Bright Spark now handles complaint #{complaint.pk}"
    )
    assert [(a.vendor, a.fence_token) for a in active_assignments(complaint)] == [(bright, 3)]
    assert VendorAssignment.objects.count() == 2
    assert FenceEvent.objects.get(outcome="stale").token == 2
    # Evergreen heard of the rival's overtaken attempt: it is taken back.
    [cancel] = cancellations(dispatch)
    assert (cancel.json["vendor"]["id"], cancel.token) == (green.pk, 2)


@pytest.mark.parametrize(("starts", "ends"), [(-90, -1), (5, 90)], ids=["ended", "future"])
def test_vendor_without_a_contract_today_is_an_error_and_writes_nothing(
    maple, complaint, alice, redis_client, starts, ends
):
    vendor = vendor_with_contract("Bright Spark", maple, starts_in_days=starts, ends_in_days=ends)
    before = state_of(complaint, redis_client)

    refused = run_action(admin_client(alice), [complaint], apply="1", vendor=vendor.pk)

    [(level, text)] = texts(refused)
    assert level == "error"
    assert text.startswith("Bright Spark's contract with Maple Court ")
    assert state_of(complaint, redis_client) == before


@pytest.mark.parametrize("value", ["abc", "-1", "", "99999999999999999999"])
def test_malformed_vendor_redisplays_the_form_and_writes_nothing(
    complaint, pipe, alice, redis_client, value
):
    before = state_of(complaint, redis_client)

    page = run_action(admin_client(alice), [complaint], apply="1", vendor=value)

    assert page.status_code == 200
    assert page.context["form"].errors["vendor"]
    assert state_of(complaint, redis_client) == before


def test_complaints_of_two_associations_are_refused_together(complaint, oak, root, redis_client):
    oak_complaint = Complaint.objects.create(organization=oak, title="Oak gate")

    refused = run_action(admin_client(root), [complaint, oak_complaint])

    assert texts(refused) == [("error", "Choose complaints of one association at a time.")]
    assert VendorAssignment.objects.count() == 0


def test_staff_cannot_act_on_another_associations_complaint(complaint, pipe, mallory, redis_client):
    before = state_of(complaint, redis_client)

    refused = run_action(admin_client(mallory), [complaint], apply="1", vendor=pipe.pk)

    # Outside her queryset the complaint is not selectable: the action sees none.
    assert texts(refused) == [("error", "None of the selected complaints could be found.")]
    assert state_of(complaint, redis_client) == before


def test_action_is_offered_only_with_the_assign_permission(complaint, pipe, alice, viewer):
    viewer.user_permissions.add(
        Permission.objects.get(content_type__app_label="hoa", codename="view_complaint")
    )
    offered = action_names(admin_client(alice).get(CHANGELIST))
    hidden = action_names(admin_client(viewer).get(CHANGELIST))

    assert "assign_vendor" in offered
    assert "assign_vendor" not in hidden
    refused = run_action(admin_client(viewer), [complaint], apply="1", vendor=pipe.pk)
    assert refused.status_code == 200  # the changelist again, nothing run
    assert VendorAssignment.objects.count() == 0


@fenced
def test_changelist_shows_the_current_vendor_and_the_change_page_the_history(
    complaint, pipe, green, alice
):
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    assign_vendor(complaint=complaint, vendor=green, actor=alice, reassign=True, replacing=first)
    client = admin_client(alice)

    changelist = client.get(CHANGELIST)
    change = client.get(reverse("admin:hoa_complaint_change", args=[complaint.pk]))

    assert changelist.status_code == 200
    assert [c.current_vendor_name for c in changelist.context["cl"].result_list] == ["Evergreen"]
    assert change.status_code == 200
    [history] = [
        f for f in change.context["inline_admin_formsets"] if f.opts.model is VendorAssignment
    ]
    assert [(a.vendor.name, a.active, a.fence_token) for a in history.formset.queryset] == [
        ("Evergreen", True, 2),
        ("Pipe Pros", False, 1),
    ]
    assert not history.has_add_permission and not history.has_change_permission
    assert not history.has_delete_permission


def test_assignments_cannot_be_deleted_in_the_admin(complaint, pipe, root):
    assignment = VendorAssignment.objects.create(complaint=complaint, vendor=pipe, fence_token=1)
    client = admin_client(root)

    page = client.post(reverse("admin:vendors_vendorassignment_delete", args=[assignment.pk]))

    assert page.status_code == 403
    assert VendorAssignment.objects.filter(pk=assignment.pk).exists()
