"""Breaking a stuck lease from /ops/locks/: who may, what they must say, and why it is safe."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import transaction
from django.urls import reverse

from hoa.models import AccessDenial, Complaint, StaffMembership
from locking import StaleFencingToken, advance_fence
from locking.keys import lock_key
from locking.models import FenceEvent
from locking.operators import holder_of
from locking.tests.support import hidden_fields
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)

BREAK_URL = "/ops/locks/break/"
LONG = timedelta(seconds=60)


def shown(page) -> dict[str, str]:
    """What the break page posts back besides the reason: the resource and the lease shown."""
    fields = hidden_fields(page.content.decode())
    return {name: fields[name][0] for name in ("resource", "token", "owner") if name in fields}


@pytest.fixture
def operator(alice):
    """Alice, staff of Maple Court, who may also break leases."""
    alice.user_permissions.add(Permission.objects.get(codename="break_lease"))
    return type(alice).objects.get(pk=alice.pk)  # fresh: permissions are cached per object


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Broken gate")


@pytest.fixture
def held(complaint, fence_lock):
    lease = fence_lock.acquire(assignment_resource(complaint.pk), ttl=LONG, holder="stuck-worker")
    yield lease
    lease.release()


def test_the_confirmation_names_the_holder_and_asks_for_a_reason(client, operator, held):
    client.force_login(operator)
    page = client.get(BREAK_URL, {"resource": held.resource})
    assert page.status_code == 200
    html = page.content.decode()
    assert "stuck-worker on " in html and 'name="reason"' in html
    assert b"Break" in client.get("/ops/locks/").content  # the button is offered


def test_a_reason_is_required_and_nothing_is_broken_without_one(
    client, operator, held, redis_client
):
    client.force_login(operator)
    page = client.get(BREAK_URL, {"resource": held.resource})
    answer = client.post(BREAK_URL, {**shown(page), "reason": "   "})
    assert answer.status_code == 400
    assert "Say why the lease is broken." in answer.content.decode()
    assert redis_client.exists(lock_key(held.resource))
    assert not FenceEvent.objects.filter(outcome="broken").exists()


def test_breaking_deletes_the_lease_and_records_who_and_why(
    client, operator, held, redis_client, maple
):
    client.force_login(operator)
    page = client.get(BREAK_URL, {"resource": held.resource})
    assert shown(page) == {
        "resource": held.resource,
        "token": str(held.token),
        "owner": held.owner,
    }
    answer = client.post(BREAK_URL, {**shown(page), "reason": "worker hung"})
    assert answer.status_code == 303
    assert answer["Location"].startswith("/ops/locks/?resource=")
    assert not redis_client.exists(lock_key(held.resource))
    event = FenceEvent.objects.get(outcome="broken")
    assert (event.actor, event.token, event.scope) == ("alice", held.token, f"org:{maple.pk}")
    assert "worker hung" in event.detail


def test_staff_without_the_permission_see_no_button_and_are_refused(
    client, alice, held, redis_client
):
    client.force_login(alice)
    assert client.get("/ops/locks/").status_code == 403  # office staff: not an operator
    assert client.get(BREAK_URL, {"resource": held.resource}).status_code == 403
    refused = client.post(BREAK_URL, {"resource": held.resource, "reason": "mine now"})
    assert refused.status_code == 403
    assert redis_client.exists(lock_key(held.resource))
    assert AccessDenial.objects.filter(actor="alice", reason="permission").count() == 3
    # An operator who reads the locks but may not break one sees no button.
    alice.user_permissions.add(Permission.objects.get(codename="view_fenceevent"))
    client.force_login(type(alice).objects.get(pk=alice.pk))
    assert b'data-testid="break-lease"' not in client.get("/ops/locks/").content


def test_another_associations_lease_is_not_found(client, operator, oak, fence_lock):
    other = Complaint.objects.create(organization=oak, title="Oak's gate")
    lease = fence_lock.acquire(assignment_resource(other.pk), ttl=LONG, holder="oak-cron")
    try:
        client.force_login(operator)
        assert client.get(BREAK_URL, {"resource": lease.resource}).status_code == 404
        post = client.post(BREAK_URL, {"resource": lease.resource, "reason": "x"})
        assert post.status_code == 404
        assert holder_of(lease.resource) is not None
    finally:
        lease.release()


def test_the_broken_holder_that_wakes_up_is_fenced_out(
    client, operator, complaint, held, pipe, dispatch
):
    """Why breaking is safe: the next holder's token is larger, so the stuck one's late
    write is refused once the next one has committed."""
    client.force_login(operator)
    page = client.get(BREAK_URL, {"resource": held.resource})
    assert client.post(BREAK_URL, {**shown(page), "reason": "worker hung"}).status_code == 303

    newer = assign_vendor(complaint=complaint, vendor=pipe, actor=operator)
    assert newer.token == held.token + 1

    with pytest.raises(StaleFencingToken), transaction.atomic():  # the stuck holder wakes
        advance_fence(Complaint.objects.filter(pk=complaint.pk), held)
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == newer.token


def test_the_ops_page_and_the_admin_action_record_the_operators_address_one_way(
    client, operator, complaint, fence_lock, settings, django_user_model
):
    """Both break a lease with locking's one form, so both record the address the project
    trusts (CLIENT_IP_HEADER behind a proxy), not each its own."""
    settings.CLIENT_IP_HEADER = "X-Real-IP"
    behind_the_proxy = {"X-Real-IP": "203.0.113.7"}
    resource = assignment_resource(complaint.pk)
    fence_lock.acquire(resource, ttl=LONG, holder="stuck-1")
    client.force_login(operator)
    asked = client.get(BREAK_URL, {"resource": resource})
    page = client.post(BREAK_URL, {**shown(asked), "reason": "hung"}, headers=behind_the_proxy)
    assert page.status_code == 303

    second = fence_lock.acquire(resource, ttl=LONG, holder="stuck-2")
    olga = django_user_model.objects.create_user("olga", is_staff=True)
    olga.user_permissions.add(Permission.objects.get(codename="break_lease"))
    StaffMembership.objects.create(user=olga, organization=complaint.organization)  # its operator
    client.force_login(olga)
    selected = FenceEvent.objects.get(outcome="broken")
    action = client.post(
        reverse("admin:locking_fenceevent_changelist"),
        {
            "action": "break_leases",
            "_selected_action": [selected.pk],
            "apply": "1",
            "reason": "hung",
            "shown": f"{second.token}|{second.owner}|{resource}",
        },
        headers=behind_the_proxy,
    )
    assert action.status_code == 302

    broken = FenceEvent.objects.filter(outcome="broken").order_by("id")
    assert list(broken.values_list("actor", "ip")) == [
        ("alice", "203.0.113.7"),
        ("olga", "203.0.113.7"),
    ]


def test_a_break_confirmed_after_another_holder_took_over_is_refused_naming_the_new_holder(
    client, operator, complaint, fence_lock, redis_client
):
    """Issue 44, item 4: the page showed the stuck holder; by the time the operator
    confirmed, it had let go and a healthy holder had taken the lease. The POST broke the
    healthy one, and the audit named it with the operator's reason."""
    resource = assignment_resource(complaint.pk)
    stuck = fence_lock.acquire(resource, ttl=LONG, holder="stuck-worker")
    client.force_login(operator)
    page = client.get(BREAK_URL, {"resource": resource})
    assert "stuck-worker" in page.content.decode()

    stuck.release()  # it woke up and finished; a healthy worker takes over
    healthy = fence_lock.acquire(resource, ttl=LONG, holder="healthy-worker")
    answer = client.post(BREAK_URL, {**shown(page), "reason": "stuck-worker hangs"})

    assert answer.status_code == 409
    html = answer.content.decode()
    assert "now held by healthy-worker" in html and f"(token {healthy.token})" in html
    assert redis_client.get(lock_key(resource)).decode().startswith(healthy.owner + "|")
    assert not FenceEvent.objects.filter(outcome="broken").exists()
    refused = FenceEvent.objects.get(operation="break-lease")
    assert (refused.outcome, refused.token, refused.actor) == ("conflict", healthy.token, "alice")
    # The 409 shows the new holder with the form to break that one, if it is the one.
    assert shown(answer) == {
        "resource": resource,
        "token": str(healthy.token),
        "owner": healthy.owner,
    }
    healthy.release()
