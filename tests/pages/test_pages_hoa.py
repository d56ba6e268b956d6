"""The hoa staff pages: associations, dashboard, lock status, the 409 page, error pages."""

import re
import socket
from datetime import date, timedelta
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from charges.models import MonthlyChargeRun
from hoa.answers.table import conflict
from hoa.models import AccessDenial, Complaint, Organization
from hoa.web.views import server_error
from locking import LockHeld, Outcome
from locking.connection import client_for_url
from locking.models import FenceEvent
from tests.harness.net import closed_port

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=30)


def month_label() -> str:
    return f"{timezone.localdate():%Y-%m}"


def charges_resource(org, month: str | None = None) -> str:
    return f"monthly-charges:org:{org.pk}:{month or month_label()}"


def vendor_resource(complaint) -> str:
    return f"vendor-assignment:complaint:{complaint.pk}"


def event(org, resource, outcome="committed", token=1, operation="monthly-charges", **extra):
    return FenceEvent.objects.create(
        resource=resource,
        scope=f"org:{org.pk}",
        operation=operation,
        outcome=outcome,
        token=token,
        actor=extra.pop("actor", "alice"),
        **extra,
    )


def count(pattern: str, html: str) -> int:
    return len(re.findall(pattern, html))


@pytest.fixture
def complaints(maple, oak):
    """Maple: two open (one past its SLA) and one resolved; Oak: one open."""
    now = timezone.now()
    return {
        "leak": Complaint.objects.create(
            organization=maple,
            unit=maple.units.first(),
            title="Leaking pipe",
            priority=Complaint.Priority.HIGH,
            sla_breached_at=now,
        ),
        "gate": Complaint.objects.create(organization=maple, title="Broken gate"),
        "done": Complaint.objects.create(
            organization=maple, title="Old noise", status=Complaint.Status.RESOLVED
        ),
        "oak": Complaint.objects.create(organization=oak, title="Oak roof"),
    }


def login_redirect(response, path: str) -> bool:
    return response.status_code == 302 and response["Location"] == (
        f"{reverse('login')}?next={quote(path)}"
    )


# -- associations -----------------------------------------------------------------------


def test_anonymous_visitor_is_sent_to_login_from_every_staff_page(client, maple):
    for path in ("/orgs/", f"/orgs/{maple.slug}/", "/ops/locks/"):
        assert login_redirect(client.get(path), path), path
    assert client.get("/")["Location"] == reverse("login")


def test_organization_list_shows_only_the_staff_members_associations(client, alice, complaints):
    client.force_login(alice)
    response = client.get("/orgs/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "Maple Court" in html
    assert "Oak Ridge" not in html
    assert "<b>10</b> units" in html
    assert "<b>2</b> open complaints" in html
    assert "<b>1</b> past their SLA" in html
    assert "Charges not generated yet" in html


def test_superuser_sees_every_association(client, root, complaints):
    client.force_login(root)
    html = client.get("/orgs/").content.decode()
    assert "Maple Court" in html and "Oak Ridge" in html


def test_staff_of_no_association_sees_an_explanation(client, nobody, maple):
    client.force_login(nobody)
    html = client.get("/orgs/").content.decode()
    assert "You are not staff of any association yet" in html
    assert "Maple Court" not in html


# -- dashboard --------------------------------------------------------------------------


def test_dashboard_shows_units_complaints_breaches_and_a_generate_button(
    client, alice, maple, complaints
):
    client.force_login(alice)
    response = client.get(f"/orgs/{maple.slug}/")
    html = response.content.decode()
    assert response.status_code == 200
    stats = [int(n) for n in re.findall(r'<span class="num">(\d+)</span>', html)]
    assert stats == [10, 2, 1]  # units, open complaints, open past SLA
    assert "Not generated yet" in html
    action = f'action="/orgs/{maple.slug}/charges/{month_label()}/generate/"'
    assert action in html
    assert "Leaking pipe" in html and "Broken gate" in html
    assert "Old noise" not in html  # resolved
    assert "Oak roof" not in html  # another association


def test_dashboard_shows_this_months_completed_run_without_a_button(client, alice, maple):
    MonthlyChargeRun.objects.create(
        organization=maple,
        month=timezone.localdate().replace(day=1),
        status=MonthlyChargeRun.Status.COMPLETED,
        completed_at=timezone.now(),
        total="2055.00",
        charge_count=10,
    )
    client.force_login(alice)
    html = client.get(f"/orgs/{maple.slug}/").content.decode()
    assert "$2,055.00" in html
    assert "10 units" in html
    assert "Generated" in html
    assert "/generate/" not in html


def test_dashboard_hides_the_generate_button_from_staff_without_the_permission(
    client, viewer, maple
):
    client.force_login(viewer)
    html = client.get(f"/orgs/{maple.slug}/").content.decode()
    assert "Not generated yet" in html
    assert "/generate/" not in html


def test_dashboard_of_another_association_is_not_found(client, mallory, maple):
    client.force_login(mallory)
    response = client.get(f"/orgs/{maple.slug}/")
    assert response.status_code == 404
    assert "Maple Court" not in response.content.decode()


def test_superuser_opens_any_dashboard(client, root, oak):
    client.force_login(root)
    response = client.get(f"/orgs/{oak.slug}/")
    assert response.status_code == 200
    assert "Oak Ridge" in response.content.decode()


def test_dashboard_of_a_quiet_association_shows_empty_states(client, olivia, maple):
    client.force_login(olivia)
    html = client.get(f"/orgs/{maple.slug}/").content.decode()
    assert "No open complaints. Nothing needs attention." in html
    assert "No fenced attempts yet." in html
    assert "<svg" not in html  # no attempts: no chart


def test_dashboard_lists_and_charts_only_its_own_fenced_attempts(client, olivia, maple, oak):
    event(maple, charges_resource(maple), "committed", 3)
    event(maple, charges_resource(maple), "busy", 3)
    event(maple, charges_resource(maple), "busy", 3)
    event(oak, charges_resource(oak), "stale", 9)
    client.force_login(olivia)
    html = client.get(f"/orgs/{maple.slug}/").content.decode()
    assert charges_resource(maple) in html
    assert charges_resource(oak) not in html
    # One bar per outcome; the busy bar says 2.
    assert count(r'<rect class="bar ', html) == len(Outcome)
    assert "<title>Busy (lock held): 2</title>" in html
    assert "Stale token rejected: 0" in html


def test_conflicts_are_a_bar_a_badge_and_a_filter_of_their_own(client, olivia, maple):
    complaint = vendor_resource(Complaint.objects.create(organization=maple, title="Leak"))
    event(maple, complaint, "committed", 2, operation="vendor-assignment")
    event(maple, complaint, "conflict", 3, operation="vendor-assignment")
    event(maple, complaint, "already_done", 4, operation="vendor-assignment")
    client.force_login(olivia)

    dashboard = client.get(f"/orgs/{maple.slug}/").content.decode()
    locks = client.get("/ops/locks/", {"outcome": "conflict"})
    timeline = client.get("/ops/locks/", {"resource": complaint}).content.decode()

    assert "<title>Changed since viewed: 1</title>" in dashboard
    assert "<title>Already done: 1</title>" in dashboard
    assert '<rect class="bar conflict"' in dashboard
    assert '<span class="badge conflict">Changed since viewed</span>' in dashboard
    assert locks.status_code == 200
    table = locks.content.decode().split('id="events"')[1]
    assert re.findall(r'<tr class="outcome-(\w+)">', table) == ["conflict"]
    assert '<span class="swatch conflict"></span>Changed since viewed' in timeline
    assert '<g class="mark conflict">' in timeline  # a lane of its own in the timeline


# -- lock status ------------------------------------------------------------------------


def test_lock_page_shows_a_lease_the_test_holds_with_its_holder_and_token(
    client, olivia, maple, fence_lock
):
    resource = charges_resource(maple)
    with fence_lock.acquire(resource, ttl=LEASE, holder="cron-host-7") as lease:
        client.force_login(olivia)
        html = client.get("/ops/locks/").content.decode()
    assert f'<tr data-resource="{resource}">' in html
    row = html.split(f'<tr data-resource="{resource}">')[1].split("</tr>")[0]
    assert "cron-host-7 on " in row
    assert f'<td class="num">{lease.token}</td>' in row
    assert "Monthly charges for" in row and "Maple Court" in row
    assert re.search(r"(29|30)\.\d s", row)  # TTL left


def test_lock_page_hides_another_associations_leases_from_staff(
    client, olivia, maple, oak, complaints, fence_lock
):
    # An association whose id starts with Maple's digits: a bare prefix would match it.
    lookalike = Organization.objects.create(pk=int(f"{maple.pk}7"), name="Elm", slug="elm")
    mine = [charges_resource(maple), vendor_resource(complaints["gate"])]
    theirs = [
        charges_resource(oak),
        vendor_resource(complaints["oak"]),
        charges_resource(lookalike),
    ]
    leases = [fence_lock.acquire(resource, ttl=LEASE) for resource in mine + theirs]
    try:
        client.force_login(olivia)
        html = client.get("/ops/locks/").content.decode()
    finally:
        for lease in leases:
            lease.release()
    holders = html.split('id="holders"')[1].split("</section>")[0]
    for resource in mine:
        assert f'data-resource="{resource}"' in holders, resource
    for resource in theirs:
        assert resource not in html, resource


def test_superuser_sees_every_lease(client, root, maple, oak, fence_lock):
    with (
        fence_lock.acquire(charges_resource(maple), ttl=LEASE),
        fence_lock.acquire(charges_resource(oak), ttl=LEASE),
        fence_lock.acquire("some-other-job:nightly", ttl=LEASE),
        # Not a row of ours: an id too long for a bigint must not break the page.
        fence_lock.acquire("vendor-assignment:complaint:" + "9" * 30, ttl=LEASE),
    ):
        client.force_login(root)
        response = client.get("/ops/locks/")
    html = response.content.decode()
    assert response.status_code == 200
    holders = html.split('id="holders"')[1].split("</section>")[0]
    assert count(r"<tr data-resource=", holders) == 4


def test_an_operator_of_no_association_sees_no_lease_and_no_event(
    client, nobody, maple, fence_lock
):
    nobody.user_permissions.add(Permission.objects.get(codename="view_fenceevent"))
    event(maple, charges_resource(maple))
    with fence_lock.acquire(charges_resource(maple), ttl=LEASE):
        client.force_login(nobody)
        html = client.get("/ops/locks/").content.decode()
    assert "No lock is held right now." in html
    assert "No fenced attempts recorded yet." in html
    assert "maple" not in html.lower().replace("maple-court", "")


def test_lock_page_lists_only_the_staff_members_events_and_filters_them(client, olivia, maple, oak):
    event(maple, charges_resource(maple), "committed", 1)
    event(maple, charges_resource(maple), "busy", 1, actor="bob")
    event(maple, "vendor-assignment:complaint:77", "stale", 4, operation="vendor-assignment")
    event(oak, charges_resource(oak), "failed", 2)
    client.force_login(olivia)

    def rows(**query):
        response = client.get("/ops/locks/", query)
        assert response.status_code == 200
        table = response.content.decode().split('id="events"')[1]
        return re.findall(r'<tr class="outcome-(\w+)">', table)

    assert rows() == ["stale", "busy", "committed"]
    assert rows(outcome="busy") == ["busy"]
    assert rows(operation="vendor-assignment") == ["stale"]
    assert rows(resource=charges_resource(maple)) == ["busy", "committed"]
    assert rows(resource=charges_resource(oak)) == []  # exists, but not Alice's


def test_lock_page_answers_400_to_a_malformed_filter(client, olivia, maple):
    event(maple, charges_resource(maple))
    client.force_login(olivia)
    response = client.get("/ops/locks/", {"resource": "has space", "outcome": "won"})
    html = response.content.decode()
    assert response.status_code == 400
    assert "Resource: resource name must be printable and contain no whitespace" in html
    assert "Outcome: Choose an outcome from the list." in html
    assert '<tr class="outcome-' not in html


def test_lock_timeline_draws_each_attempt_with_its_token_and_the_current_lease(
    client, olivia, maple, fence_lock
):
    resource = charges_resource(maple)
    base = timezone.now() - timedelta(minutes=5)
    for offset, outcome, token in [(0, "committed", 1), (10, "busy", 1), (20, "stale", 2)]:
        event(maple, resource, outcome, token, at=base + timedelta(seconds=offset))
    event(maple, charges_resource(maple, "2020-01"), "committed", 8)  # another resource
    with fence_lock.acquire(resource, ttl=LEASE) as lease:
        client.force_login(olivia)
        html = client.get("/ops/locks/", {"resource": resource}).content.decode()
    svg = html.split('<svg class="chart timeline"')[1].split("</svg>")[0]
    assert count(r'<g class="mark ', svg) == 3
    assert count(r'<g class="mark committed">', svg) == 1
    assert count(r'<g class="mark stale">', svg) == 1
    assert ">#1<" in svg and ">#2<" in svg and ">#8<" not in svg
    assert '<g class="lease">' in svg and f">#{lease.token}<" in svg
    # One lane per outcome that happened, plus the lease.
    assert count(r'class="lane-label"', svg) == 4


def test_lock_timeline_of_another_associations_resource_shows_nothing(client, olivia, oak):
    resource = charges_resource(oak)
    event(oak, resource, "committed", 5)
    client.force_login(olivia)
    html = client.get("/ops/locks/", {"resource": resource}).content.decode()
    assert "No attempts recorded for this resource." in html
    assert '<g class="mark' not in html
    assert 'id="counters"' in html and f'data-resource="{resource}"' not in html


def test_fence_counters_flag_a_redis_counter_below_the_database_token(
    client, olivia, maple, complaints, fence_lock
):
    lost = complaints["gate"]
    Complaint.objects.filter(pk=lost.pk).update(last_fence_token=10)
    fence_lock.acquire(vendor_resource(lost), ttl=LEASE).release()  # Redis counter: 1
    event(maple, vendor_resource(lost), "committed", 10, operation="vendor-assignment")
    fine = charges_resource(maple)
    for _ in range(3):
        fence_lock.acquire(fine, ttl=LEASE).release()
    event(maple, fine, "committed", 3)
    client.force_login(olivia)
    html = client.get("/ops/locks/").content.decode()
    counters = html.split('id="counters"')[1].split("</section>")[0]
    behind = re.findall(r'<tr class="behind" data-resource="([^"]+)">', counters)
    assert behind == [vendor_resource(lost)]
    row = counters.split(f'data-resource="{vendor_resource(lost)}"')[1].split("</tr>")[0]
    assert re.findall(r'<td class="num"[^>]*>(\d+)</td>', row) == ["1", "10"]
    assert "counter behind" in row
    ok_row = counters.split(f'data-resource="{fine}"')[1].split("</tr>")[0]
    assert re.findall(r'<td class="num"[^>]*>(\S+)</td>', ok_row) == ["3", "—"]  # no run row yet
    assert "in order" in ok_row


def test_htmx_refresh_returns_only_the_holders_table(client, olivia, maple, fence_lock):
    with fence_lock.acquire(charges_resource(maple), ttl=LEASE):
        client.force_login(olivia)
        response = client.get("/ops/locks/", headers={"HX-Request": "true", "HX-Target": "holders"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.strip().startswith('<section class="card" id="holders"')
    assert "<html" not in html and 'id="events"' not in html
    assert f'data-resource="{charges_resource(maple)}"' in html
    assert "HX-Request" in response["Vary"]


def test_htmx_refresh_after_the_session_ended_sends_the_whole_page_to_login(client):
    response = client.get("/ops/locks/", headers={"HX-Request": "true", "HX-Target": "holders"})
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"{reverse('login')}?next=/ops/locks/"
    assert response.content == b""


@pytest.fixture
def unreachable_lock_redis(settings):
    """Point the lock client at a closed port for one test; drop the cached client after."""
    settings.LOCK_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/8"
    yield
    client_for_url.cache_clear()


def test_lock_page_still_shows_the_audit_trail_when_redis_is_down(
    client, olivia, maple, unreachable_lock_redis
):
    event(maple, charges_resource(maple), "committed", 4)
    client.force_login(olivia)
    response = client.get("/ops/locks/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "Redis cannot be reached" in html
    assert count(r'<tr class="outcome-committed">', html) == 1


# -- the 409 page -----------------------------------------------------------------------


def test_conflict_page_names_the_holder_and_retries_with_the_same_fields(olivia, maple, fence_lock):
    resource = charges_resource(maple)
    with fence_lock.acquire(resource, ttl=LEASE, holder="olivia"), pytest.raises(LockHeld) as busy:
        fence_lock.acquire(resource, ttl=LEASE)
    request = RequestFactory().post(
        "/orgs/maple-court/complaints/4/assign/",
        {"vendor": "7", "reassign": "on", "csrfmiddlewaretoken": "old-token"},
    )
    request.user = olivia
    response = conflict(
        request,
        title="Busy",
        message="Someone else is assigning a vendor.",
        lease=busy.value,
        retry_url=request.path,
    )
    html = response.content.decode()
    assert response.status_code == 409
    assert '<p class="message">Someone else is assigning a vendor.</p>' in html
    # The lease's facts are for operators: one link to them, none of them on the page.
    link = f"/ops/locks/?resource={quote(resource)}"
    assert f'href="{link}">Details for operators</a>' in html
    # The host as the holder label shows it ("on <host> pid"): a bare host name as short as
    # this machine's ("vm") turns up inside a random CSRF token about once in 60 runs.
    host = f" on {socket.gethostname()} pid "
    for operator_fact in (" pid ", host, busy.value.holder, "Until at the latest", "expires in"):
        assert operator_fact not in html
    form = html.split('<form method="post" action="/orgs/maple-court/complaints/4/assign/"')[1]
    form = form.split("</form>")[0]
    assert '<input type="hidden" name="vendor" value="7">' in form
    assert '<input type="hidden" name="reassign" value="on">' in form
    assert "old-token" not in form
    assert count(r'name="csrfmiddlewaretoken"', form) == 1


def test_conflict_page_retries_with_the_fields_the_caller_chose(alice):
    request = RequestFactory().post("/x/", {"vendor": "7"})
    request.user = alice
    html = conflict(
        request,
        title="Assigned already",
        message="Another vendor won.",
        winner="Ace Plumbing was assigned by bob.",
        retry_url="/x/",
        retry_fields={"vendor": "7", "reassign": "on"},
    ).content.decode()
    assert '<p class="winner what-now">Ace Plumbing was assigned by bob.</p>' in html
    assert '<input type="hidden" name="reassign" value="on">' in html


# -- error pages ------------------------------------------------------------------------


def test_unknown_page_answers_the_sites_404(client, alice):
    client.force_login(alice)
    response = client.get("/no/such/page/")
    html = response.content.decode()
    assert response.status_code == 404
    assert 'data-testid="error"' in html and "Not found" in html
    assert 'href="/orgs/"' in html  # the site's own navigation


def test_action_without_the_permission_answers_the_sites_403_and_writes_nothing(
    client, viewer, maple
):
    client.force_login(viewer)
    response = client.post(f"/orgs/{maple.slug}/charges/{month_label()}/generate/")
    html = response.content.decode()
    assert response.status_code == 403
    assert 'data-testid="error"' in html and "Not allowed" in html
    assert not MonthlyChargeRun.objects.exists()
    assert not FenceEvent.objects.exists()


def test_request_for_an_unknown_host_answers_the_sites_400(client):
    response = client.get("/orgs/", headers={"host": "evil.example"})
    assert response.status_code == 400
    assert "Bad request" in response.content.decode()


def test_form_posted_without_its_csrf_token_answers_a_clear_403(alice):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(reverse("logout"))
    assert response.status_code == 403
    assert "This form has expired" in response.content.decode()


def test_server_error_page_renders_without_touching_the_request():
    response = server_error(RequestFactory().get("/"))
    html = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong" in html
    assert "Log out" not in html


# -- fencing internals are the operators' (issue 25, item 4) ---------------------------------


@pytest.mark.django_db(transaction=True)
def test_office_staff_see_no_token_no_fenced_attempts_and_no_locks_and_get_403(
    client, alice, olivia, maple, fence_lock
):
    """The same pages for both: staff without locking's permissions get them without the
    fencing internals; an operator (olivia) gets all of it."""
    from charges.services import generate_monthly_charges
    from tests.vendors_support import active_vendor
    from vendors.services import assign_vendor

    complaint = Complaint.objects.create(organization=maple, title="Leak")
    assign_vendor(complaint=complaint, vendor=active_vendor("Pipe Pros", maple), actor=olivia)
    generate_monthly_charges(organization=maple, month=date(2026, 3, 1), actor=olivia)
    pages = {
        "dashboard": f"/orgs/{maple.slug}/",
        "complaint": f"/orgs/{maple.slug}/complaints/{complaint.pk}/",
        "run": f"/orgs/{maple.slug}/charges/2026-03/",
    }
    seen = {}
    for person in (alice, olivia):
        client.force_login(person)
        seen[person.username] = {
            name: client.get(url).content.decode() for name, url in pages.items()
        }
        seen[person.username]["locks"] = client.get("/ops/locks/").status_code

    staff, operator = seen["alice"], seen["olivia"]
    assert staff["locks"] == 403 and operator["locks"] == 200
    for name in pages:
        assert ">Locks</a>" not in staff[name] and ">Locks</a>" in operator[name], name
    assert "token 1" not in staff["complaint"] and "token 1" in operator["complaint"]
    assert "Last fencing token" not in staff["run"] and "Last fencing token" in operator["run"]
    assert "Recent fenced attempts" not in staff["dashboard"]
    assert "Recent fenced attempts" in operator["dashboard"]
    assert AccessDenial.objects.filter(actor="alice", reason="permission").count() == 1


def test_a_409_page_keeps_staff_wording_and_links_details_for_operators_only(
    alice, olivia, maple, fence_lock
):
    for person, shows_link in ((alice, False), (olivia, True)):
        request = RequestFactory().post("/x/", {"month": "2026-03"})
        request.user = person
        with pytest.raises(LockHeld) as held, fence_lock.acquire("r:1", ttl=LEASE, holder="bob"):
            fence_lock.acquire("r:1", ttl=LEASE)
        html = conflict(
            request, title="Busy", message="Another worker is busy.", lease=held.value
        ).content.decode()
        assert "Another worker is busy." in html
        assert ("Details for operators" in html) is shows_link, person
