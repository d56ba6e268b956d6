"""Breaking a stuck lease: the library call, why it is safe, and the admin action.

The takeover test runs the stuck holder in a thread of its own (its own connection),
paused at an event the test sets only after the newer holder committed.
"""

import re
import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection, transaction
from django.urls import reverse

from locking import FenceLock, Outcome, StaleFencingToken, advance_fence, run_fenced
from locking.audit import Attempt
from locking.keys import holder_label, lock_key
from locking.models import FenceEvent
from locking.operators import (
    BreakLeaseForm,
    HolderChanged,
    HolderInfo,
    ViewerScopes,
    break_lease,
    client_ip,
)
from locking.tests.support import hidden_fields
from locking.tests.testapp.models import FencedThing

TTL = timedelta(seconds=30)
WAIT = 10  # seconds: upper bound for every wait in this module
RESOURCE = "fenced-thing:stuck"


def events(resource: str) -> list[tuple]:
    return list(
        FenceEvent.objects.for_resource(resource)
        .order_by("id")
        .values_list("outcome", "token", "actor", "detail")
    )


# --- the library call -------------------------------------------------------------------


@pytest.mark.django_db
def test_break_lease_deletes_whichever_lease_is_held_and_audits_who_and_why(
    fence_lock, redis_client
):
    held = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-7")

    broken = break_lease(
        RESOURCE,
        token=held.token,
        by="oona",
        reason="worker-7 hangs on the billing call",
        scope="org:1",
    )

    assert isinstance(broken, HolderInfo)
    assert (broken.resource, broken.owner, broken.label, broken.token) == (
        RESOURCE,
        held.owner,
        holder_label("worker-7"),
        held.token,
    )
    assert timedelta(0) < broken.ttl_left <= TTL
    assert redis_client.exists(lock_key(RESOURCE)) == 0
    assert fence_lock.current_token(RESOURCE) == held.token  # the counter is untouched
    [event] = FenceEvent.objects.all()
    assert (event.outcome, event.token, event.actor, event.scope, event.operation) == (
        Outcome.BROKEN,
        held.token,
        "oona",
        "org:1",
        "break-lease",
    )
    assert event.detail.startswith(f"lease of {holder_label('worker-7')} since ")
    assert event.detail.endswith(" broken: worker-7 hangs on the billing call")
    assert held.release() is False  # the broken holder cannot touch what comes next


@pytest.mark.django_db
def test_break_lease_leaves_a_holder_granted_since_it_was_shown_and_names_it(
    fence_lock, redis_client
):
    """Issue 44, item 4: the break deleted whoever held the resource when it arrived, not
    the holder the operator was shown; the audit then named the healthy holder with the
    operator's reason. The script compares the token (and the owner) before it deletes."""
    shown = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-7")
    shown.release()  # it finished after all; a healthy holder takes over
    healthy = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-8")

    with pytest.raises(HolderChanged) as refused:
        break_lease(RESOURCE, token=shown.token, by="oona", reason="worker-7 hangs")
    with pytest.raises(HolderChanged):  # the owner alone tells them apart too
        break_lease(RESOURCE, token=healthy.token, owner=shown.owner, by="oona", reason="r")

    changed = refused.value
    assert (changed.resource, changed.token, changed.holder.owner, changed.holder.token) == (
        RESOURCE,
        shown.token,
        healthy.owner,
        healthy.token,
    )
    assert changed.holder.label == holder_label("worker-8")
    assert redis_client.get(lock_key(RESOURCE)).decode().startswith(healthy.owner + "|")
    assert [(o, t, a) for o, t, a, _ in events(RESOURCE)] == [
        ("conflict", healthy.token, "oona"),
        ("conflict", healthy.token, "oona"),
    ]
    assert healthy.release() is True


@pytest.mark.django_db
def test_break_lease_wants_the_token_shown_by_keyword(fence_lock):
    fence_lock.acquire(RESOURCE, ttl=TTL)
    with pytest.raises(TypeError, match="token"):
        break_lease(RESOURCE, by="oona", reason="stuck")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="token"):
        break_lease(RESOURCE, token="1", by="oona", reason="stuck")  # type: ignore[arg-type]


@pytest.mark.django_db
def test_breaking_a_resource_nobody_holds_returns_none_and_records_nothing(fence_lock):
    assert break_lease(RESOURCE, token=1, by="oona", reason="looked stuck") is None
    assert not FenceEvent.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("by", "reason"), [("oona", ""), ("oona", "   "), ("", "stuck")])
def test_break_lease_refuses_an_empty_reason_or_operator_and_keeps_the_lease(
    fence_lock, redis_client, by, reason
):
    held = fence_lock.acquire(RESOURCE, ttl=TTL)

    with pytest.raises(ValueError, match="needs"):
        break_lease(RESOURCE, token=held.token, by=by, reason=reason)

    assert redis_client.get(lock_key(RESOURCE)).decode().startswith(held.owner)
    assert not FenceEvent.objects.exists()


@pytest.mark.django_db
def test_the_broken_holders_keep_alive_reports_the_loss(fence_lock):
    held = fence_lock.acquire(RESOURCE, ttl=timedelta(milliseconds=300))
    told: list = []
    held.on_lost(told.append)

    with held.keep_alive():
        break_lease(RESOURCE, token=held.token, by="oona", reason="stuck")
        assert held.lost.wait(WAIT)

    assert told == [held]


@pytest.mark.django_db(transaction=True)
def test_a_broken_holder_that_wakes_is_refused_after_the_next_holder_committed(fence_lock):
    thing = FencedThing.objects.create(name="before")
    resource = f"fenced-thing:{thing.pk}"
    rows = FencedThing.objects.filter(pk=thing.pk)
    stuck = threading.Event()
    wake = threading.Event()
    outcome: dict = {}

    def stuck_work(lease) -> None:
        outcome["token"] = lease.token
        stuck.set()
        wake.wait(WAIT)  # hung: on a call, in a GC pause, under SIGSTOP
        with transaction.atomic():
            advance_fence(rows, lease)
            rows.update(name="written by the broken holder")

    def holder_a() -> None:
        try:
            run_fenced(resource, stuck_work, ttl=TTL, attempt=Attempt(actor="a"))
        except StaleFencingToken as exc:
            outcome["error"] = exc
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=holder_a)
    thread.start()
    try:
        assert stuck.wait(WAIT)
        broken = break_lease(resource, token=outcome["token"], by="oona", reason="a hangs")
        with FenceLock().acquire(resource, ttl=TTL, holder="b") as lease_b, transaction.atomic():
            advance_fence(rows, lease_b)
            rows.update(name="written by b")
    finally:
        wake.set()
        thread.join(WAIT)

    assert broken.token == outcome["token"] == 1
    assert lease_b.token == 2
    assert (outcome["error"].token, outcome["error"].recorded) == (1, 2)
    thing.refresh_from_db()
    assert (thing.name, thing.last_fence_token) == ("written by b", 2)
    assert [(o, t, a) for o, t, a, _ in events(resource)] == [
        ("broken", 1, "oona"),
        ("stale", 1, "a"),
    ]


# --- the admin action -------------------------------------------------------------------


CHANGELIST = "admin:locking_fenceevent_changelist"


@pytest.fixture
def staff(django_user_model):
    def make(username: str, *codenames: str):
        user = django_user_model.objects.create_user(
            username=username, password="pw", is_staff=True
        )
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="locking", codename__in=codenames)
        )
        return user

    return make


def everything_in_org_one(user, resources) -> ViewerScopes:
    """The project's answer (``LOCK_SCOPES_CALLABLE``) here: its operators read ``org:1``,
    and every resource is in it (test_admin_scopes.py plays two tenants)."""
    return ViewerScopes(visible=frozenset({"org:1"}), resources=dict.fromkeys(resources, "org:1"))


@pytest.fixture
def busy_event(db, settings):
    settings.LOCK_SCOPES_CALLABLE = "locking.tests.test_break_lease.everything_in_org_one"
    return FenceEvent.objects.create(
        resource=RESOURCE, token=1, outcome=Outcome.BUSY, scope="org:1", actor="bob"
    )


def offered_actions(client) -> list[str]:
    page = client.get(reverse(CHANGELIST))
    assert page.status_code == 200
    form = page.context["action_form"]  # None when no action is offered at all
    return [name for name, _ in form.fields["action"].choices] if form else []


def break_action(client, event: FenceEvent, **extra):
    return client.post(
        reverse(CHANGELIST), {"action": "break_leases", "_selected_action": [event.pk], **extra}
    )


def test_the_break_action_is_not_offered_without_the_permission(
    client, staff, busy_event, fence_lock, redis_client
):
    held = fence_lock.acquire(RESOURCE, ttl=TTL)
    client.force_login(staff("viewer", "view_fenceevent"))

    assert "break_leases" not in offered_actions(client)
    # Posting it anyway does nothing: Django runs no action it did not offer.
    answer = break_action(client, busy_event, apply="1", reason="stuck")
    assert answer.status_code == 200  # the changelist again
    assert redis_client.get(lock_key(RESOURCE)).decode().startswith(held.owner)
    assert list(FenceEvent.objects.values_list("outcome", flat=True)) == ["busy"]


def test_the_break_action_names_the_holder_asks_why_and_breaks_on_confirmation(
    client, staff, busy_event, fence_lock, redis_client
):
    held = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-7")
    client.force_login(staff("oona", "break_lease"))
    assert "break_leases" in offered_actions(client)

    confirm = break_action(client, busy_event)
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert f'data-resource="{RESOURCE}"' in page
    assert holder_label("worker-7") in page
    # Seconds as people read them, not a timedelta (0:00:29.987000): the value depends on
    # how long the machine took to get here, the form does not.
    assert re.search(r'<td class="expires-in">([1-9]|[12][0-9]|30) s</td>', page), page
    assert '<td class="state">held</td>' in page
    assert redis_client.exists(lock_key(RESOURCE)) == 1  # nothing broken before confirming

    shown = hidden_fields(page)["shown"]
    assert shown == [f"{held.token}|{held.owner}|{RESOURCE}"]  # the lease the page showed

    refused = break_action(client, busy_event, apply="1", reason="  ", shown=shown)
    assert refused.status_code == 200
    assert "Say why the lease is broken." in refused.content.decode()
    assert redis_client.exists(lock_key(RESOURCE)) == 1

    done = break_action(client, busy_event, apply="1", reason="worker-7 hangs", shown=shown)
    assert done.status_code == 302
    assert redis_client.exists(lock_key(RESOURCE)) == 0
    broken = FenceEvent.objects.get(outcome=Outcome.BROKEN)
    assert (broken.resource, broken.token, broken.actor, broken.scope) == (
        RESOURCE,
        held.token,
        "oona",
        "org:1",
    )
    assert broken.detail.endswith("broken: worker-7 hangs")
    messages = [str(m) for m in done.wsgi_request._messages]
    assert messages == [
        f"Broke the lease of {holder_label('worker-7')} on {RESOURCE} (token {held.token})."
    ]
    assert broken.ip == "127.0.0.1"  # the test client's REMOTE_ADDR


def test_the_break_action_leaves_a_holder_granted_since_the_confirmation_and_warns(
    client, staff, busy_event, fence_lock, redis_client
):
    """Issue 44, item 4: the confirmation named worker-7; by the time it was confirmed a
    healthy worker-8 held the lease, and the action broke worker-8's."""
    shown = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-7")
    client.force_login(staff("oona", "break_lease"))
    confirm = break_action(client, busy_event)
    posted_back = hidden_fields(confirm.content.decode()).get("shown", [])

    shown.release()
    healthy = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-8")
    done = break_action(client, busy_event, apply="1", reason="worker-7 hangs", shown=posted_back)

    assert done.status_code == 302
    assert redis_client.get(lock_key(RESOURCE)).decode().startswith(healthy.owner + "|")
    assert not FenceEvent.objects.filter(outcome=Outcome.BROKEN).exists()
    assert [(str(m), m.level_tag) for m in done.wsgi_request._messages] == [
        (
            f"The lease on {RESOURCE} is now held by {holder_label('worker-8')} (token "
            f"{healthy.token}), not the lease you were shown (token {shown.token}): "
            "nothing was broken.",
            "warning",
        )
    ]


def test_the_break_page_leaves_a_holder_granted_since_it_was_drawn_and_warns(
    client, staff, busy_event, fence_lock, redis_client
):
    """The admin's break by resource name, as the action: it posts back the lease it showed."""
    shown = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-7")
    client.force_login(staff("oona", "break_lease"))
    page = client.get(reverse("admin:locking_fenceevent_break"), {"resource": RESOURCE})
    posted_back = {name: values[0] for name, values in hidden_fields(page.content.decode()).items()}
    assert (posted_back["token"], posted_back["owner"]) == (str(shown.token), shown.owner)

    shown.release()
    healthy = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-8")
    done = client.post(
        reverse("admin:locking_fenceevent_break"), {**posted_back, "reason": "worker-7 hangs"}
    )

    assert done.status_code == 302
    assert redis_client.get(lock_key(RESOURCE)).decode().startswith(healthy.owner + "|")
    [(message, level)] = [(str(m), m.level_tag) for m in done.wsgi_request._messages]
    assert level == "warning" and f"now held by {holder_label('worker-8')}" in message
    assert not FenceEvent.objects.filter(outcome=Outcome.BROKEN).exists()


def test_the_break_action_breaks_no_lease_its_confirmation_did_not_show(
    client, staff, busy_event, fence_lock, redis_client
):
    """A confirmation that showed nothing held (or a crafted POST without what it showed)
    leaves a lease granted since alone."""
    client.force_login(staff("oona", "break_lease"))
    confirm = break_action(client, busy_event)
    assert "No lease held: nothing to break." in confirm.content.decode()
    healthy = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-8")

    done = break_action(client, busy_event, apply="1", reason="stuck")

    assert redis_client.get(lock_key(RESOURCE)).decode().startswith(healthy.owner + "|")
    [message] = [str(m) for m in done.wsgi_request._messages]
    assert message.startswith(f"The lease on {RESOURCE} is now held by ")


def test_the_admin_action_records_the_address_the_project_says(
    client, staff, busy_event, fence_lock, settings
):
    settings.LOCK_CLIENT_IP_CALLABLE = "locking.tests.test_break_lease.address_from_a_proxy"
    held = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-7")
    client.force_login(staff("oona", "break_lease"))

    done = client.post(
        reverse(CHANGELIST),
        {
            "action": "break_leases",
            "_selected_action": [busy_event.pk],
            "apply": "1",
            "reason": "stuck",
            "shown": f"{held.token}|{held.owner}|{RESOURCE}",
        },
        headers={"X-Real-IP": "192.0.2.9"},
    )

    assert done.status_code == 302
    assert FenceEvent.objects.get(outcome=Outcome.BROKEN).ip == "192.0.2.9"


# --- the one form every break-a-lease page uses -------------------------------------------


def address_from_a_proxy(request) -> str | None:
    """A project's own address rule (``LOCK_CLIENT_IP_CALLABLE``): a proxy's header."""
    return request.META.get("HTTP_X_REAL_IP")


SHOWN = {"token": "7", "owner": "4f1c"}  # the lease a page showed, in its hidden fields


@pytest.mark.parametrize(
    ("data", "errors"),
    [
        (
            {"resource": RESOURCE, **SHOWN, "reason": " \n "},
            {"reason": ["Say why the lease is broken."]},
        ),
        (
            {"resource": "has space", **SHOWN, "reason": "stuck"},
            {"resource": ["resource name must be printable and contain no whitespace"]},
        ),
        ({"resource": "", **SHOWN, "reason": "stuck"}, {"resource": ["This field is required."]}),
        (
            {"resource": RESOURCE, "token": "x", "owner": "4f1c", "reason": "stuck"},
            {"token": ["Enter a whole number."]},
        ),
    ],
)
def test_the_form_wants_a_reason_and_a_resource_name_it_can_lock(data, errors):
    form = BreakLeaseForm(data)
    assert not form.is_valid()
    assert form.errors == errors


def test_a_page_that_chose_its_resources_posts_only_the_reason():
    form = BreakLeaseForm({"reason": "worker-7 hangs"}, resource_field=False)
    assert form.is_valid(), form.errors
    assert list(form.fields) == ["reason"]


@pytest.mark.django_db
def test_the_forms_break_records_who_why_and_the_requests_address(
    fence_lock, settings, rf, django_user_model
):
    settings.LOCK_CLIENT_IP_CALLABLE = None  # the default: REMOTE_ADDR
    held = fence_lock.acquire(RESOURCE, ttl=TTL, holder="worker-7")
    form = BreakLeaseForm(
        {
            "resource": RESOURCE,
            "token": held.token,
            "owner": held.owner,
            "reason": " worker-7 hangs ",
        }
    )
    assert form.is_valid(), form.errors
    request = rf.post("/", REMOTE_ADDR="198.51.100.4", HTTP_X_REAL_IP="192.0.2.9")
    request.user = django_user_model.objects.create_user("oona")

    broken = form.break_lease(request, scope="org:1")

    assert broken.token == held.token
    event = FenceEvent.objects.get(outcome=Outcome.BROKEN)
    assert (event.actor, event.ip, event.scope) == ("oona", "198.51.100.4", "org:1")
    assert event.detail.endswith("broken: worker-7 hangs")

    settings.LOCK_CLIENT_IP_CALLABLE = "locking.tests.test_break_lease.address_from_a_proxy"
    again = fence_lock.acquire(RESOURCE, ttl=TTL)
    form.break_lease(request, shown=again)
    assert FenceEvent.objects.filter(outcome=Outcome.BROKEN).latest("id").ip == "192.0.2.9"


@pytest.mark.parametrize("address", ["", "unknown", "10.0.0.1, 10.0.0.2"])
def test_an_address_that_is_not_an_ip_is_recorded_as_none(address, rf, settings):
    settings.LOCK_CLIENT_IP_CALLABLE = None
    assert client_ip(rf.get("/", REMOTE_ADDR=address)) is None
    assert client_ip(rf.get("/", REMOTE_ADDR=" 2001:db8::1 ")) == "2001:db8::1"
