"""The admin as an operator of one scope sees it: every page and action of the audit, the
leases held now, and breaking a lease by its resource name (a first-ever holder included).

A project says what a viewer may see with ``LOCK_SCOPES_CALLABLE``; these tests play a
project of two tenants, red and blue (``two_tenants``). Rita operates red, with locking's
two permissions, as an operators group gives them. The leases are real: granted in Redis and
never released (a stuck holder), some before their resource has any audit row.
"""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from locking import Outcome
from locking.audit import record_fence_event
from locking.keys import lock_key
from locking.models import FenceEvent
from locking.operators import ViewerScopes, recorded_scopes, viewer_scopes
from locking.tests.support import free_port, hidden_fields

pytestmark = pytest.mark.django_db

STUCK = timedelta(seconds=45)  # under a minute: its time left reads "N s"
RED, BLUE = "tenant:red", "tenant:blue"
# Who operates which tenant, as the project knows it.
OPERATES = {"rita": RED}

CHANGELIST = "admin:locking_fenceevent_changelist"
HOLDERS = "admin:locking_fenceevent_holders"
BREAK = "admin:locking_fenceevent_break"


def two_tenants(user, resources) -> ViewerScopes:
    """The project's answer: a user reads the tenant they operate; a resource
    ``fenced-thing:<tenant>:<n>`` is in its tenant."""
    visible = frozenset({OPERATES[user.username]} if user.username in OPERATES else ())
    placed = {}
    for resource in resources:
        match = re.fullmatch(r"fenced-thing:(red|blue):\d+", resource)
        placed[resource] = f"tenant:{match[1]}" if match else ""
    return ViewerScopes(visible=visible, resources=placed)


@pytest.fixture(autouse=True)
def project_scopes(settings):
    settings.LOCK_SCOPES_CALLABLE = "locking.tests.test_admin_scopes.two_tenants"


def operator(django_user_model, username: str, *codenames: str):
    user = django_user_model.objects.create_user(username=username, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="locking",
            codename__in=codenames or ("view_fenceevent", "break_lease"),
        )
    )
    return user


@pytest.fixture
def rita(django_user_model):
    return operator(django_user_model, "rita")


@pytest.fixture
def tenants(fence_lock):
    """Each tenant's attempts (by its staff, rosa and bianca), a stuck holder of a resource
    with attempts, and a stuck first-ever holder (no audit row)."""
    for tenant, staff in (("red", "rosa"), ("blue", "bianca")):
        record_fence_event(
            resource=f"fenced-thing:{tenant}:1",
            outcome=Outcome.BUSY,
            token=1,
            actor=staff,
            detail=f"held by {tenant}-cron",
            scope=f"tenant:{tenant}",
            operation="thing",
        )
    leases = {
        name: fence_lock.acquire(
            f"fenced-thing:{name.replace('-first', '')}:{n}", ttl=STUCK, holder=f"{name}-worker"
        )
        for name, n in (("red", 1), ("blue", 1), ("red-first", 2), ("blue-first", 2))
    }
    assert not FenceEvent.objects.filter(resource__endswith=":2").exists()  # first-ever
    return leases


def lock_value(redis_client, resource: str) -> bytes | None:
    return redis_client.get(lock_key(resource))


def shown(page) -> list[str]:
    return [event.resource for event in page.context["cl"].result_list]


# --- A: the audit's pages ------------------------------------------------------------------


def test_the_list_its_search_filters_and_dates_show_only_the_viewers_scope(client, rita, tenants):
    client.force_login(rita)
    url = reverse(CHANGELIST)

    page = client.get(url)
    assert page.status_code == 200
    assert shown(page) == ["fenced-thing:red:1"]
    html = page.content.decode()
    assert "rosa" in html and "bianca" not in html and "fenced-thing:<wbr>blue" not in html

    assert shown(client.get(url, {"q": "bianca"})) == []  # another tenant's staff: no hit
    assert shown(client.get(url, {"q": "blue"})) == []
    assert shown(client.get(url, {"q": "rosa"})) == ["fenced-thing:red:1"]
    assert shown(client.get(url, {"outcome__exact": "busy"})) == ["fenced-thing:red:1"]
    assert shown(client.get(url, {"operation": "thing"})) == ["fenced-thing:red:1"]
    event = FenceEvent.objects.get(resource="fenced-thing:red:1")
    dated = client.get(url, {"at__year": event.at.year, "at__month": event.at.month})
    assert shown(dated) == ["fenced-thing:red:1"]


def test_another_scopes_attempt_cannot_be_opened_nor_its_history_read(client, rita, tenants):
    client.force_login(rita)
    own = FenceEvent.objects.get(actor="rosa")
    other = FenceEvent.objects.get(actor="bianca")

    assert (
        "rosa"
        in client.get(reverse("admin:locking_fenceevent_change", args=[own.pk])).content.decode()
    )
    for view in ("admin:locking_fenceevent_change", "admin:locking_fenceevent_history"):
        answer = client.get(reverse(view, args=[other.pk]), follow=True)
        html = answer.content.decode()
        assert answer.redirect_chain == [(reverse("admin:index"), 302)], view
        assert f"with ID \u201c{other.pk}\u201d doesn\u2019t exist" in html
        assert "bianca" not in html and "fenced-thing:blue" not in html


def test_the_break_action_breaks_only_the_viewers_leases_and_leaves_another_scopes(
    client, rita, tenants, redis_client
):
    client.force_login(rita)
    blue_before = lock_value(redis_client, "fenced-thing:blue:1")
    selected = list(FenceEvent.objects.order_by("id").values_list("pk", flat=True))  # both

    confirm = client.post(
        reverse(CHANGELIST), {"action": "break_leases", "_selected_action": selected}
    )
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert 'data-resource="fenced-thing:red:1"' in html and "red-worker" in html
    assert "fenced-thing:blue" not in html and "blue-worker" not in html

    done = client.post(
        reverse(CHANGELIST),
        {
            "action": "break_leases",
            "_selected_action": selected,
            "apply": "1",
            "reason": "hung",
            "shown": hidden_fields(html)["shown"],
        },
    )
    assert done.status_code == 302
    assert lock_value(redis_client, "fenced-thing:red:1") is None
    assert lock_value(redis_client, "fenced-thing:blue:1") == blue_before
    broken = FenceEvent.objects.filter(outcome=Outcome.BROKEN)
    assert list(broken.values_list("resource", "scope", "actor")) == [
        ("fenced-thing:red:1", RED, "rita")
    ]

    # Only another tenant's attempt selected (a crafted POST): nothing is broken.
    blue_event = FenceEvent.objects.get(actor="bianca")
    alone = client.post(
        reverse(CHANGELIST),
        {
            "action": "break_leases",
            "_selected_action": [blue_event.pk],
            "apply": "1",
            "reason": "mine now",
        },
        follow=True,
    )
    assert "None of the selected attempts is one you may see" in alone.content.decode()
    assert lock_value(redis_client, "fenced-thing:blue:1") == blue_before
    assert broken.count() == 1


def test_an_attempt_recorded_under_the_viewers_scope_does_not_open_another_scopes_lease(
    client, rita, tenants, redis_client
):
    """The scope of the resource, as the project places it, decides, not the event's tag:
    an attempt on a blue resource mistagged red (a caller's slip) is listed to Rita, but
    its lease is not hers to break."""
    record_fence_event(
        resource="fenced-thing:blue:1", outcome=Outcome.BUSY, token=1, actor="x", scope=RED
    )
    mistagged = FenceEvent.objects.get(actor="x")
    before = lock_value(redis_client, "fenced-thing:blue:1")
    client.force_login(rita)

    answer = client.post(
        reverse(CHANGELIST),
        {"action": "break_leases", "_selected_action": [mistagged.pk], "apply": "1", "reason": "r"},
        follow=True,
    )

    assert "The lease on fenced-thing:blue:1 is not one you may break." in answer.content.decode()
    assert lock_value(redis_client, "fenced-thing:blue:1") == before
    assert not FenceEvent.objects.filter(outcome=Outcome.BROKEN).exists()


# --- A and B: the leases held now, and breaking one by name --------------------------------


def test_the_holders_page_lists_the_viewers_leases_a_first_holder_included_and_no_other(
    client, rita, tenants
):
    client.force_login(rita)

    page = client.get(reverse(HOLDERS))

    assert page.status_code == 200
    html = page.content.decode()
    rows = dict(re.findall(r'<tr class="lease" data-resource="([^"]+)">(.*?)</tr>', html, re.S))
    assert sorted(rows) == ["fenced-thing:red:1", "fenced-thing:red:2"]
    first = rows["fenced-thing:red:2"]  # granted, never released, never recorded
    assert "red-first-worker" in first
    assert f"<td>{tenants['red-first'].token}</td>" in first
    assert re.search(r'<td class="expires-in">[0-9]{1,2} s</td>', first), first  # of 45 s
    assert '<td class="state">held</td>' in first
    assert "0:00:" not in html
    assert "blue-worker" not in html and "blue-first-worker" not in html
    assert f'href="{reverse(BREAK)}?resource=fenced-thing%3Ared%3A2"' in first
    assert reverse(HOLDERS) in client.get(reverse(CHANGELIST)).content.decode()  # linked


def test_breaking_by_name_another_scopes_lease_is_not_found_and_it_stays(
    client, rita, tenants, redis_client
):
    client.force_login(rita)
    for resource in ("fenced-thing:blue:1", "fenced-thing:blue:2", "fenced-thing:green:1"):
        before = lock_value(redis_client, resource)
        asked = client.get(reverse(BREAK), {"resource": resource})
        posted = client.post(reverse(BREAK), {"resource": resource, "reason": "mine now"})
        assert (asked.status_code, posted.status_code) == (404, 404), resource
        assert "worker" not in asked.content.decode() + posted.content.decode()
        assert lock_value(redis_client, resource) == before
    assert not FenceEvent.objects.filter(outcome=Outcome.BROKEN).exists()


def test_a_stuck_first_holder_is_broken_by_name_with_a_reason_and_audited(
    client, rita, tenants, redis_client
):
    lease = tenants["red-first"]
    client.force_login(rita)

    asked = client.get(reverse(BREAK), {"resource": lease.resource})
    assert asked.status_code == 200
    assert "red-first-worker" in asked.content.decode()
    assert lock_value(redis_client, lease.resource) is not None  # nothing before confirming

    done = client.post(reverse(BREAK), {**posted_back(asked), "reason": " worker hung "})

    assert done.status_code == 302 and done["Location"] == reverse(HOLDERS)
    assert lock_value(redis_client, lease.resource) is None
    event = FenceEvent.objects.get(outcome=Outcome.BROKEN)
    assert (event.resource, event.token, event.actor, event.scope, event.operation, event.ip) == (
        lease.resource,
        lease.token,
        "rita",
        RED,
        "break-lease",
        "127.0.0.1",
    )
    assert event.detail.endswith("broken: worker hung") and "red-first-worker" in event.detail
    messages = [str(m) for m in client.get(reverse(HOLDERS)).context["messages"]]
    assert messages == [
        f"Broke the lease of {lease_label('red-first-worker')} on {lease.resource} "
        f"(token {lease.token})."
    ]


def posted_back(page) -> dict[str, str]:
    """What a break page posts back besides the reason: the resource and the lease shown."""
    fields = hidden_fields(page.content.decode())
    return {name: fields[name][0] for name in ("resource", "token", "owner")}


def lease_label(holder: str) -> str:
    from locking.keys import holder_label

    return holder_label(holder)


@pytest.mark.parametrize(
    ("data", "status", "says"),
    [
        ({"resource": "fenced-thing:red:2", "reason": "  "}, 400, "Say why the lease is broken."),
        ({"resource": "has space", "reason": "x"}, 400, "must be printable"),
        ({"resource": "", "reason": "x"}, 400, "resource name"),
        ({"resource": "{brace}", "reason": "x"}, 400, "{"),
    ],
)
def test_breaking_by_name_wants_a_reason_and_a_resource_name(
    client, rita, tenants, redis_client, data, status, says
):
    client.force_login(rita)
    before = lock_value(redis_client, "fenced-thing:red:2")

    answer = client.post(reverse(BREAK), data)

    assert answer.status_code == status
    assert says in answer.content.decode()
    assert lock_value(redis_client, "fenced-thing:red:2") == before
    assert not FenceEvent.objects.filter(outcome=Outcome.BROKEN).exists()


def test_breaking_by_name_a_resource_nobody_holds_says_so(client, rita):
    client.force_login(rita)

    asked = client.get(reverse(BREAK), {"resource": "fenced-thing:red:9"})
    done = client.post(reverse(BREAK), {**posted_back(asked), "reason": "stuck?"})

    assert "No lease held: nothing to break." in asked.content.decode()
    assert done.status_code == 302
    messages = [str(m) for m in client.get(reverse(HOLDERS)).context["messages"]]
    assert messages == ["fenced-thing:red:9 had no lease to break."]
    assert not FenceEvent.objects.exists()


def test_an_operator_who_only_reads_sees_the_holders_but_may_not_break(
    client, django_user_model, tenants, redis_client
):
    client.force_login(operator(django_user_model, "rita", "view_fenceevent"))
    before = lock_value(redis_client, "fenced-thing:red:2")

    page = client.get(reverse(HOLDERS))
    assert page.status_code == 200
    assert "red-first-worker" in page.content.decode()
    assert 'data-testid="break-lease"' not in page.content.decode()
    assert client.get(reverse(BREAK), {"resource": "fenced-thing:red:2"}).status_code == 403
    posted = client.post(reverse(BREAK), {"resource": "fenced-thing:red:2", "reason": "x"})
    assert posted.status_code == 403
    assert lock_value(redis_client, "fenced-thing:red:2") == before


def test_the_admin_index_leads_to_the_holders_page_for_whoever_may_see_it(
    client, django_user_model
):
    """Issue 45, item 6: the holders page was reachable only from a link on the fence
    events' list. The admin index (and locking's app index) lists "Leases held now"."""
    entry = reverse("admin:locking_leaseholder_changelist")
    client.force_login(operator(django_user_model, "rita", "view_fenceevent"))
    for index in (reverse("admin:index"), reverse("admin:app_list", args=["locking"])):
        page = client.get(index)
        [model] = [m for m in page.context["app_list"][0]["models"] if m["admin_url"] == entry]
        assert (str(model["name"]), model["add_url"]) == ("Leases held now", None)
        assert f'href="{entry}"' in page.content.decode()
    followed = client.get(entry)
    assert (followed.status_code, followed["Location"]) == (302, reverse(HOLDERS))

    client.force_login(django_user_model.objects.create_user("sam", is_staff=True))
    assert entry not in client.get(reverse("admin:index")).content.decode()
    assert client.get(entry).status_code == 403


def test_staff_without_lockings_permissions_get_no_holders_page(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("sam", is_staff=True))
    assert client.get(reverse(HOLDERS)).status_code == 403
    assert client.get(reverse(BREAK), {"resource": "fenced-thing:red:2"}).status_code == 403


def test_a_superuser_sees_and_may_break_every_scope(client, django_user_model, tenants):
    """Control: the pages above hide what another scope holds, not everything."""
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))

    assert len(shown(client.get(reverse(CHANGELIST)))) == 2
    html = client.get(reverse(HOLDERS)).content.decode()
    assert html.count('<tr class="lease"') == 4
    assert client.get(reverse(BREAK), {"resource": "fenced-thing:blue:2"}).status_code == 200


def test_with_redis_down_the_holders_page_and_a_break_say_so_and_break_nothing(
    client, rita, settings
):
    settings.LOCK_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    client.force_login(rita)

    page = client.get(reverse(HOLDERS))
    done = client.post(reverse(BREAK), {"resource": "fenced-thing:red:2", "reason": "hung"})

    assert page.status_code == 503
    assert "Redis cannot be reached" in page.content.decode()
    assert done.status_code == 503
    assert not FenceEvent.objects.exists()


# --- a lease without a TTL ------------------------------------------------------------------


def test_a_lease_key_without_a_ttl_is_listed_as_never_expiring_and_can_be_broken(
    client, rita, redis_client
):
    """Not written so by locking (a restore, a SET by hand): nothing but a break ends it."""
    redis_client.set(lock_key("fenced-thing:red:3"), "f00d|1700000000000|restored")
    client.force_login(rita)

    page = client.get(reverse(HOLDERS)).content.decode()
    asked = client.get(reverse(BREAK), {"resource": "fenced-thing:red:3"})
    done = client.post(reverse(BREAK), {**posted_back(asked), "reason": "by hand"})

    assert '<td class="expires-in">never</td>' in page
    assert '<td class="state">never expires</td>' in page
    assert done.status_code == 302
    assert redis_client.exists(lock_key("fenced-thing:red:3")) == 0


# --- the default answer: a project that tags no tenants ------------------------------------


def test_by_default_operators_read_the_attempts_recorded_without_a_scope(
    client, rita, django_user_model, settings, fence_lock
):
    settings.LOCK_SCOPES_CALLABLE = "locking.operators.recorded_scopes"  # the default
    record_fence_event(resource="job:1", outcome=Outcome.BUSY, actor="cron")
    record_fence_event(resource="job:2", outcome=Outcome.BUSY, actor="tagged", scope="org:1")
    fence_lock.acquire("job:1", ttl=STUCK, holder="job-1-worker")
    fence_lock.acquire("job:2", ttl=STUCK, holder="job-2-worker")
    fence_lock.acquire("job:3", ttl=STUCK, holder="first-worker")  # nothing recorded yet

    assert viewer_scopes(rita, ["job:1", "job:2", "job:3"]) == ViewerScopes(
        visible=frozenset({""}), resources={"job:1": "", "job:2": "org:1"}
    )
    client.force_login(rita)
    assert shown(client.get(reverse(CHANGELIST))) == ["job:1"]
    html = client.get(reverse(HOLDERS)).content.decode()
    assert "job-1-worker" in html and "first-worker" in html and "job-2-worker" not in html
    assert client.get(reverse(BREAK), {"resource": "job:2"}).status_code == 404

    root = django_user_model.objects.create_superuser("root", password="pw")
    client.force_login(root)
    assert sorted(shown(client.get(reverse(CHANGELIST)))) == ["job:1", "job:2"]
    asked = client.get(reverse(BREAK), {"resource": "job:2"})
    client.post(reverse(BREAK), {**posted_back(asked), "reason": "stuck"})
    broken = FenceEvent.objects.get(outcome=Outcome.BROKEN)
    assert (broken.resource, broken.scope) == ("job:2", "org:1")  # the scope it was recorded in


def test_the_default_places_a_resource_in_the_scope_of_its_latest_attempt():
    record_fence_event(resource="job:1", outcome=Outcome.BUSY, scope="org:1")
    record_fence_event(resource="job:1", outcome=Outcome.BUSY, scope="org:2")
    assert recorded_scopes(None, ["job:1", "job:9"]).resources == {"job:1": "org:2"}
    assert recorded_scopes(None, []).resources == {}
