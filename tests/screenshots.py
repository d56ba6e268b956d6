"""Screenshots of the main staff pages for docs/screenshots/ (and the README).

Not part of the suite (the file name does not start with ``test_``); run it on purpose:

    TEST_DATABASE_NAME=test_hoa_screens REDIS_URL=redis://127.0.0.1:56379/9 \\
        .venv/bin/python -m pytest tests/screenshots.py -p no:cacheprovider

It seeds the demo data into the test database, produces some history through the real
services (charge runs of past months, vendor assignments, a refused busy attempt, a stale
holder rejected by the fence, one complaint taken through the workflow), holds two leases,
and photographs the pages as ``alice`` (the complaint timeline, the filtered complaint list
and the list on a 390 px phone too).
"""

import contextlib
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from charges.exceptions import GenerationBusy
from charges.models import MonthlyChargeRun
from charges.operations import charge_resource
from charges.selectors import add_months, current_month
from charges.services import generate_monthly_charges
from hoa.complaints.workflow import add_note, change_sla, change_status
from hoa.demo import DEMO_PASSWORD, seed_demo
from hoa.models import Complaint, Organization
from hoa.scopes import scope_for_organization
from locking import FenceLock, StaleFencingToken, advance_fence, record_fence_event
from tests.test_browser_staff import chromium, site  # noqa: F401 - fixtures
from vendors.models import Vendor
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
    with busy, contextlib.suppress(GenerationBusy):
        generate_monthly_charges(organization=maple, month=month, actor=alice)

    # A paused holder: its lease was re-granted to a newer holder, whose write is recorded;
    # the old holder's late write is rejected by the fence.
    last = add_months(month, -1)
    resource = charge_resource(maple, last)
    old = lock.acquire(resource, ttl=timedelta(milliseconds=50), holder="worker-2")
    newer = lock.acquire(resource, ttl=timedelta(seconds=5), wait=timedelta(seconds=2))
    run = MonthlyChargeRun.objects.filter(organization=maple, month=last)
    with transaction.atomic():
        advance_fence(run, newer.token)
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
            advance_fence(run, old.token)
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

    complaints = list(Complaint.objects.filter(organization=maple).order_by("pk"))
    plumber = Vendor.objects.get(name="Pipe Pros Plumbing")
    gardener = Vendor.objects.get(name="Evergreen Landscaping")
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


def test_take_screenshots(chromium, site, redis_client):  # noqa: F811 - fixtures
    seed_demo()
    lock = FenceLock()
    facts = _history(lock)
    maple, complaint = facts["maple"], facts["complaints"][2]
    OUT.mkdir(parents=True, exist_ok=True)

    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(f"{site}/accounts/login/")
    page.screenshot(path=OUT / "login.png")
    page.fill("#id_username", "alice")
    page.fill("#id_password", DEMO_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{site}/orgs/")
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
    # the complaint Alice opens.
    get_user_model().objects.get_or_create(username="bob")
    next_month = add_months(current_month(), 1)
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
        page.goto(f"{site}/ops/locks/")
        page.screenshot(path=OUT / "locks.png", full_page=True)
        resource = charge_resource(maple, add_months(current_month(), -1))
        page.goto(f"{site}/ops/locks/?resource={resource}")
        page.locator("#timeline").screenshot(path=OUT / "lock-timeline.png")
    page.goto(f"{site}/orgs/{maple.slug}/complaints/{facts['complaints'][0].pk}/")
    page.locator("#timeline").screenshot(path=OUT / "complaint-timeline.png")
    page.goto(f"{site}/orgs/{maple.slug}/complaints/?status=unresolved&overdue=yes&sort=due")
    page.screenshot(path=OUT / "complaints-filtered.png", full_page=True)
    phone = chromium.new_context(viewport={"width": 390, "height": 844})
    phone.add_cookies(context.cookies())
    phone_page = phone.new_page()
    phone_page.goto(f"{site}/orgs/{maple.slug}/complaints/")
    phone_page.screenshot(path=OUT / "complaints-390.png", full_page=True)
    phone.close()
    page.goto(f"{site}/orgs/{maple.slug}/no-such-page/")
    page.screenshot(path=OUT / "not-found.png")
    context.close()
