"""The registry of fenced operations, proved by a third one: budget approval (``tests.budgets``),
installed by the test settings only. ``hoa`` never names it (tests/house/test_imports.py), yet the
frame shows it everywhere it shows charges and vendors: the lock status page, the
navigation, the Organization admin, the metrics, breaking a lease, the lease-TTL check and
the demo's staff group. (Its pages add no dashboard panel and no demo data: charges' and
vendors' panels and vendors' demo data prove those.)
"""

import dataclasses
import re
from dataclasses import replace
from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.core import checks
from django.db import transaction

from hoa import operations
from hoa.answers.refusals import Busy
from hoa.demo import seed_demo, staff_group
from hoa.operations import ResourceInfo
from locking import StaleFencingToken, advance_fence
from locking.keys import lock_key
from locking.models import FenceEvent
from locking.tests.support import hidden_fields
from tests.budgets.models import AnnualBudget
from tests.budgets.operations import APPROVAL, budget_resource
from tests.budgets_support import YEAR, approve, state_of
from tests.races.test_topologies_metrics import scrape, value

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(seconds=30)
CHANGELIST = "/admin/hoa/organization/"


def holders_of(html: str) -> str:
    """The lock status page's table of current leases."""
    return html.split('id="holders"')[1].split("</section>")[0]


@pytest.fixture
def operator(alice):
    """Alice, staff of Maple Court, who may also break leases."""
    alice.user_permissions.add(Permission.objects.get(codename="break_lease"))
    return type(alice).objects.get(pk=alice.pk)  # fresh: permissions are cached per object


# -- the registry ------------------------------------------------------------------------------


def test_the_four_operations_register_and_their_pages_come_in_their_order():
    names = [operation.name for operation in operations.operations()]
    assert names == ["budget-approval", "monthly-charges", "vendor-assignment", "vendor-payment"]
    links = [link.url_name for pages in operations.every_pages() for link in pages.links]
    assert links == ["vendors:vendors", "vendors:invoices", "charges:runs", "budgets:budgets"]


def test_a_declaration_holds_the_fence_alone():
    """Eight fields: what the runner, the audit and the lock page need. What an app shows
    on the frame's pages is its ``Pages``, registered beside it."""
    fields = [field.name for field in dataclasses.fields(operations.FencedOperation)]
    assert len(fields) <= 8, fields
    assert operations.operation("vendor-assignment").scan_prefixes([7]) == [
        "vendor-assignment:complaint:"
    ]
    assert operations.operation("monthly-charges").scan_prefixes([7, 9]) == [
        "monthly-charges:org:7:",
        "monthly-charges:org:9:",
    ]


def test_a_budget_lease_is_described_scanned_and_its_token_recorded(maple, budget):
    approve(maple)  # PostgreSQL records token 1 on the budget row
    resource = budget_resource(maple, YEAR)
    described = operations.describe_resources([resource, "unknown:thing"])

    info = described[resource]
    assert (info.organization, info.description) == (maple, "Budget for 2027")
    assert (info.recorded_token, info.url) == (1, f"/orgs/{maple.slug}/budgets/")
    assert described["unknown:thing"] == ResourceInfo(resource="unknown:thing")
    assert f"budget-approval:org:{maple.pk}:" in operations.scan_prefixes([maple.pk])


def test_a_name_is_registered_once():
    assert operations.register(APPROVAL) is APPROVAL  # the same declaration again: no change
    with pytest.raises(ValueError, match="already registered"):
        operations.register(replace(APPROVAL, ttl=timedelta(seconds=5)))


# -- the pages of the frame --------------------------------------------------------------------


def test_lock_page_shows_a_budget_lease_to_its_associations_staff_only(
    client, alice, mallory, root, maple, budget, fence_lock
):
    """To its association's operators: the lock page is the operators' (issue 25)."""
    resource = budget_resource(maple, YEAR)
    for user in (alice, mallory):
        user.user_permissions.add(Permission.objects.get(codename="view_fenceevent"))
    with fence_lock.acquire(resource, ttl=LEASE, holder="board-clerk") as lease:
        pages = {}
        for user in (alice, mallory, root):
            user = type(user).objects.get(pk=user.pk)  # a fresh permission cache
            client.force_login(user)
            pages[user.username] = holders_of(client.get("/ops/locks/").content.decode())

    for username in ("alice", "root"):
        row = pages[username].split(f'<tr data-resource="{resource}">')[1].split("</tr>")[0]
        assert "board-clerk on " in row and f'<td class="num">{lease.token}</td>' in row
        assert f'<a href="/orgs/{maple.slug}/budgets/">Budget for 2027</a>' in row
        assert "Maple Court" in row
    assert resource not in pages["mallory"]


def test_navigation_links_to_the_budgets_among_the_other_operations(client, alice, maple):
    client.force_login(alice)
    html = client.get(f"/orgs/{maple.slug}/budgets/").content.decode()
    subnav = html.split('<nav class="subnav"')[1].split("</nav>")[0]
    links = re.findall(r'<a href="/orgs/maple-court/([^"]*)" ?(aria-current="page")?>', subnav)
    assert links == [
        ("", ""),  # the frame's overview
        ("charges/", ""),
        ("complaints/", ""),
        ("vendors/", ""),
        ("invoices/", ""),
        ("budgets/", 'aria-current="page"'),
    ]


# -- the admin ---------------------------------------------------------------------------------


def test_organization_admin_offers_both_operations_actions(client, alice, django_user_model):
    client.force_login(alice)
    html = client.get(CHANGELIST).content.decode()
    assert '<option value="generate_charges_for_month">' in html
    assert '<option value="approve_budget_for_year">' in html

    # Each action is offered with its own operation's permission, neither dropping the other.
    staff_group().permissions.remove(Permission.objects.get(codename="approve_budget"))
    client.force_login(django_user_model.objects.get(pk=alice.pk))
    html = client.get(CHANGELIST).content.decode()
    assert '<option value="generate_charges_for_month">' in html
    assert "approve_budget_for_year" not in html


def test_the_budget_action_approves_each_selected_organization_at_its_level(
    client, root, maple, oak, budget
):
    client.force_login(root)
    selected = {"action": "approve_budget_for_year", ACTION_CHECKBOX_NAME: [maple.pk, oak.pk]}
    asked = client.post(CHANGELIST, {**selected, "index": "0"})
    assert asked.templates[0].name == "admin/hoa/action_form.html"
    assert state_of(budget)[0] == "draft"  # nothing happens before the year is chosen

    done = client.post(CHANGELIST, {**selected, "year": "2027", "apply": "Approve"}, follow=True)

    assert [(m.level_tag, m.message) for m in done.context["messages"]] == [
        ("success", "Approved the 2027 budget of Maple Court ($120,000.00)."),
        ("error", "Oak Ridge has no budget for 2027 to approve."),
    ]
    assert state_of(budget)[:3] == ("approved", "root", 1)


# -- metrics, breaking a lease, checks, demo data ----------------------------------------------


def test_metrics_count_budget_approvals_under_their_operation_label(
    client, maple, budget, fence_lock
):
    label = {"operation": "budget-approval"}
    _status, before, _body = scrape(client)
    approve(maple)
    with (
        fence_lock.acquire(budget_resource(maple, YEAR), ttl=LEASE),
        pytest.raises(Busy),
    ):
        approve(maple)
    _status, after, body = scrape(client)

    def added(name, **labels):
        return value(after, name, **label, **labels) - value(before, name, **label, **labels)

    assert added("fence_lease_acquisitions_total") == 1
    assert added("fence_busy_total") == 1
    assert added("fenced_operation_duration_seconds_count", outcome="committed") == 1
    assert budget_resource(maple, YEAR) not in body  # a label per resource would explode


def test_breaking_a_budget_lease_fences_out_its_holder(
    client, operator, mallory, maple, budget, fence_lock, redis_client
):
    stuck = fence_lock.acquire(budget_resource(maple, YEAR), ttl=LEASE, holder="stuck-worker")
    mallory.user_permissions.add(Permission.objects.get(codename="break_lease"))
    client.force_login(mallory)  # another association's operator: not found, as on the page
    assert client.get("/ops/locks/break/", {"resource": stuck.resource}).status_code == 404

    client.force_login(operator)
    asked = client.get("/ops/locks/break/", {"resource": stuck.resource})
    assert "stuck-worker on " in asked.content.decode()
    shown = {name: values[0] for name, values in hidden_fields(asked.content.decode()).items()}
    broken = client.post("/ops/locks/break/", {**shown, "reason": "hung"})

    assert broken.status_code == 303
    assert not redis_client.exists(lock_key(stuck.resource))
    event = FenceEvent.objects.get(outcome="broken")
    assert (event.actor, event.token, event.scope) == ("alice", stuck.token, f"org:{maple.pk}")
    newer = approve(maple, actor=operator)
    assert newer.token == stuck.token + 1
    with pytest.raises(StaleFencingToken), transaction.atomic():  # the stuck holder wakes
        advance_fence(AnnualBudget.objects.filter(pk=budget.pk), stuck)
    assert state_of(budget)[:3] == ("approved", "alice", newer.token)


def test_the_lease_ttl_check_names_the_budget_lease_and_its_setting(settings):
    # Above half of the assignment's, the payment's and the budgets' 30 s.
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 20
    warned = [m.msg for m in checks.run_checks() if m.id == "hoa.W001"]
    assert len(warned) == 3
    assert any("budget-approval (30s, BUDGETS_LOCK_TTL_SECONDS)" in msg for msg in warned)

    settings.BUDGETS_LOCK_TTL_SECONDS = 60  # the setting overrides the declaration
    assert APPROVAL.lease_ttl == timedelta(seconds=60)
    assert not any("budget" in m.msg for m in checks.run_checks() if m.id == "hoa.W001")


def test_the_demo_staff_group_may_see_and_approve_budgets():
    seed_demo()
    granted = staff_group().permissions.filter(content_type__app_label="budgets")
    assert sorted(granted.values_list("codename", flat=True)) == [
        "approve_budget",
        "view_annualbudget",
    ]
