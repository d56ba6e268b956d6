"""Screenshots of the staff pages for docs/screenshots/ (and the README), at 1280 and 390 px.

Not part of the suite (the file name does not start with ``test_``); run it on purpose, as
often as the pages or the demo data change (it starts from a fresh test database each time
and overwrites the files):

    HOA_PG_PORT=55432 HOA_REDIS_PORT=56379 make screenshots

It seeds the demo data into its own test database (``test_hoa_screens``), produces some
history through the real services (charge runs of past months, vendor assignments, a
refused busy attempt, a stale holder rejected by the fence, one complaint taken through the
workflow), holds two leases, and photographs the pages as ``alice`` (office staff) and the
lock pages as ``olivia`` (an operator; created here if the demo has none), and the
dashboard, the complaint list and a complaint on a 390 px phone too.
"""

import contextlib
from datetime import timedelta
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction
from django.utils import timezone

from charges.models import MonthlyChargeRun
from charges.operations import charge_resource
from charges.selectors import add_months, current_month
from charges.services import generate_monthly_charges
from hoa.answers.refusals import Busy
from hoa.complaints.workflow import add_note, change_sla, change_status
from hoa.demo import DEMO_PASSWORD, seed_demo, staff_group
from hoa.models import Complaint, Organization, StaffMembership, scope_for_organization
from hoa.security.permissions import is_operator
from locking import FenceLock, StaleFencingToken, advance_fence
from locking.audit import record_fence_event
from tests.browser.test_browser_staff import chromium, site  # noqa: F401 - fixtures
from tests.harness.registry import operations_removed
from vendors.models import Invoice, Vendor, VendorContract
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

OUT = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _history(lock: FenceLock) -> dict:
    """Past charge runs, assignments, a busy and a stale attempt, through the services."""
    from django.contrib.auth import get_user_model

    alice = get_user_model().objects.get(username="alice")
    maple = Organization.objects.get(slug="maple-court")
    month = current_month()
    for back in range(5, 0, -1):
        generate_monthly_charges(organization=maple, month=add_months(month, -back), actor=alice)

    # A busy attempt: the cron host holds this month's lease while Alice tries.
    busy = lock.acquire(charge_resource(maple, month), ttl=timedelta(seconds=30), holder="cron")
    with busy, contextlib.suppress(Busy):
        generate_monthly_charges(organization=maple, month=month, actor=alice)

    # A paused holder: its lease was re-granted to a newer holder, whose write is recorded;
    # the old holder's late write is rejected by the fence.
    last = add_months(month, -1)
    resource = charge_resource(maple, last)
    old = lock.acquire(resource, ttl=timedelta(milliseconds=50), holder="worker-2")
    newer = lock.acquire(resource, ttl=timedelta(seconds=5), wait=timedelta(seconds=2))
    run = MonthlyChargeRun.objects.filter(organization=maple, month=last)
    with transaction.atomic():
        advance_fence(run, newer)
    newer.release()
    record_fence_event(
        resource=resource,
        outcome="already_done",
        token=newer.token,
        actor="worker-3",
        detail="the run was already completed",
        scope=scope_for_organization(maple),
        operation="monthly-charges",
    )
    try:
        with transaction.atomic():
            advance_fence(run, old)
    except StaleFencingToken as exc:
        record_fence_event(
            resource=resource,
            outcome="stale",
            token=old.token,
            actor="worker-2",
            detail=f"a newer holder recorded token {exc.recorded}",
            scope=scope_for_organization(maple),
            operation="monthly-charges",
        )

    # Open complaints nobody has assigned yet (the demo may hold others in every status).
    complaints = list(
        Complaint.objects.filter(organization=maple, status=Complaint.Status.OPEN)
        .exclude(assignments__active=True)
        .order_by("pk")[:3]
    )
    plumber, gardener = _two_vendors(maple)
    assign_vendor(complaint=complaints[0], vendor=plumber, actor=alice)
    shown = assign_vendor(complaint=complaints[1], vendor=gardener, actor=alice).assignment
    assign_vendor(
        complaint=complaints[1], vendor=plumber, actor=alice, reassign=True, replacing=shown
    )
    # One complaint through the workflow, for the timeline: a note, work, a resolution,
    # and an SLA moved with a reason.
    first = complaints[0]
    change_sla(
        complaint=first,
        due_at=first.sla_due_at + timedelta(hours=12),
        reason="Parts on order; the tenant agreed to wait.",
        actor=alice,
    )
    add_note(complaint=first, note="Tenant is away until Monday; key at the office.", actor=alice)
    for seen, to, note in (
        ("assigned", "in_progress", ""),
        ("in_progress", "resolved", "Valve replaced and the laundry room floor dried."),
    ):
        change_status(complaint=first, seen=seen, to=to, note=note, actor=alice, assigned=True)
    # Only some breaches recorded, as if the sweep had not run for the others.
    Complaint.objects.overdue().filter(priority="high").update(sla_breached_at=timezone.now())
    return {"maple": maple, "complaints": complaints, "plumber": plumber}


def _two_vendors(maple) -> tuple[Vendor, Vendor]:
    """The demo's plumber and gardener, or any two vendors under contract with Maple Court."""
    current = Vendor.objects.filter(
        contracts__in=VendorContract.objects.filter(organization=maple).active_on()
    ).distinct()
    named = {v.name: v for v in current}
    chosen = [named.pop(n) for n in ("Pipe Pros Plumbing", "Evergreen Landscaping") if n in named]
    chosen += sorted(named.values(), key=lambda v: v.name)[: 2 - len(chosen)]
    return chosen[0], chosen[1]


def _operator(maple):
    """``olivia``, an operator (the demo's, or one made here like the suite's persona)."""
    user, created = get_user_model().objects.get_or_create(username="olivia")
    if created or not is_operator(user):
        user.is_staff = True
        user.set_password(DEMO_PASSWORD)
        user.save()
        user.groups.add(staff_group())
        StaffMembership.objects.get_or_create(user=user, organization=maple)
        user.user_permissions.add(
            *Permission.objects.filter(
                content_type__app_label="locking", codename__in=["view_fenceevent", "break_lease"]
            )
        )
    return user


def _sign_in(chromium, site, username, width):  # noqa: F811 - fixtures
    context = chromium.new_context(viewport={"width": width, "height": 844 if width < 600 else 800})
    page = context.new_page()
    page.goto(f"{site}/accounts/login/?next=/orgs/")  # the list, though alice has one
    page.fill("#id_username", username)
    page.fill("#id_password", DEMO_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{site}/orgs/")
    return context, page


@pytest.fixture
def product_only():
    """The operations a `make run` has: the test settings also install tests/budgets (the
    third operation that proves the registry), which the screenshots must not show."""

    def of_the_tests(operation) -> bool:
        app = apps.get_app_config(operation.permission.partition(".")[0])
        return app.name.startswith("tests.")

    with operations_removed(of_the_tests):
        yield


def test_take_screenshots(chromium, site, redis_client, product_only):  # noqa: F811 - fixtures
    seed_demo()
    lock = FenceLock()
    facts = _history(lock)
    maple, complaint = facts["maple"], facts["complaints"][2]
    operator = _operator(maple)
    OUT.mkdir(parents=True, exist_ok=True)

    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(f"{site}/accounts/login/")
    page.screenshot(path=OUT / "login.png")
    context.close()
    context, page = _sign_in(chromium, site, "alice", 1280)
    page.screenshot(path=OUT / "organizations.png", full_page=True)

    page.goto(f"{site}/orgs/{maple.slug}/")
    page.screenshot(path=OUT / "dashboard.png", full_page=True)
    page.goto(f"{site}/orgs/{maple.slug}/charges/")
    page.screenshot(path=OUT / "charges.png", full_page=True)
    # The confirmation step of a month other than this one or the next.
    unusual = f"{add_months(current_month(), -8):%Y-%m}"  # not one of the runs above
    page.goto(f"{site}/orgs/{maple.slug}/charges/{unusual}/")
    page.click(f"form[action='/orgs/{maple.slug}/charges/{unusual}/generate/'] button")
    page.wait_for_selector("[data-testid=confirm-month]")
    page.screenshot(path=OUT / "month-confirmation.png", full_page=True)

    # Two leases held while the pages are photographed: another worker generating next
    # month's charges, and Bob (a colleague: the 409 page names him) assigning a vendor to
    # the complaint Alice opens. The lock pages are an operator's: Olivia's.
    get_user_model().objects.get_or_create(username="bob")
    next_month = add_months(current_month(), 1)
    ops, ops_page = _sign_in(chromium, site, operator.username, 1280)
    with (
        lock.acquire(charge_resource(maple, next_month), ttl=timedelta(seconds=60), holder="cron"),
        lock.acquire(assignment_resource(complaint.pk), ttl=timedelta(seconds=30), holder="bob"),
    ):
        page.goto(f"{site}/orgs/{maple.slug}/complaints/{complaint.pk}/")
        page.select_option("select[name=vendor]", str(facts["plumber"].pk))
        page.screenshot(path=OUT / "complaint.png", full_page=True)
        page.click("form[action$='/assign/'] button[type=submit]")
        page.wait_for_selector("[data-testid=conflict]")
        page.screenshot(path=OUT / "conflict-409.png", full_page=True)
        ops_page.goto(f"{site}/ops/locks/")
        ops_page.screenshot(path=OUT / "locks.png", full_page=True)
        resource = charge_resource(maple, add_months(current_month(), -1))
        ops_page.goto(f"{site}/ops/locks/?resource={resource}")
        ops_page.locator("#timeline").screenshot(path=OUT / "lock-timeline.png")
    ops.close()
    page.goto(f"{site}/orgs/{maple.slug}/complaints/{facts['complaints'][0].pk}/")
    page.locator("#timeline").screenshot(path=OUT / "complaint-timeline.png")
    page.goto(f"{site}/orgs/{maple.slug}/complaints/?status=unresolved&overdue=yes&sort=due")
    page.screenshot(path=OUT / "complaints-filtered.png", full_page=True)
    # Invoices: the association's list, and one invoice waiting for a second approval
    # (the demo's largest one still received or approved), with its timeline.
    page.goto(f"{site}/orgs/{maple.slug}/invoices/")
    page.screenshot(path=OUT / "invoices.png", full_page=True)
    shown = (
        Invoice.objects.filter(assignment__complaint__organization=maple)
        .filter(status__in=["received", "approved"])
        .order_by("-amount", "pk")
        .first()
    )
    page.goto(f"{site}/orgs/{maple.slug}/invoices/{shown.pk}/")
    page.screenshot(path=OUT / "invoice.png", full_page=True)
    page.goto(f"{site}/orgs/{maple.slug}/no-such-page/")
    page.screenshot(path=OUT / "not-found.png")

    # A phone: the same session at 390 px.
    phone = chromium.new_context(viewport={"width": 390, "height": 844})
    phone.add_cookies(context.cookies())
    phone_page = phone.new_page()
    for name, path in (
        ("dashboard-390.png", f"/orgs/{maple.slug}/"),
        ("complaints-390.png", f"/orgs/{maple.slug}/complaints/"),
        ("invoices-390.png", f"/orgs/{maple.slug}/invoices/"),
        ("complaint-390.png", f"/orgs/{maple.slug}/complaints/{facts['complaints'][0].pk}/"),
    ):
        phone_page.goto(f"{site}{path}")
        phone_page.screenshot(path=OUT / name, full_page=True)
    phone.close()
    context.close()
