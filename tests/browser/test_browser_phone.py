"""Every staff page, read on a phone (390 px) and a laptop (1280 px), as office staff and as
an operator: no text drawn over other text, no crushed cell, no page wider than the screen,
no word broken mid-word unless it is wider than its box, no date, time or phone number
broken at all (``tests.harness.layout``, whose control is
``tests/browser/test_browser_layout_harness.py``); every table's columns in view at 1280 px; chart
labels a person can read at 390 px; and nothing axe-core counts as serious or critical
(``tests.harness.accessibility``).

The data is what makes pages hard to lay out: long titles and vendor names, the longest
title and description the form takes typed as one word each, an overdue complaint in
"Needs attention", a reporter with a phone, a timeline with notes and SLA changes,
completed charge runs, fenced attempts with epoch-sized tokens, a lease held while the lock
pages are read.
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from charges.operations import charge_resource
from charges.selectors import add_months, current_month
from charges.services import generate_monthly_charges
from hoa.complaints.workflow import NOTE_MAX_LENGTH, Reporter, add_note, change_sla, open_complaint
from hoa.models import Complaint, Unit, scope_for_organization
from locking.audit import record_fence_event
from tests.browser.test_browser_staff import TIMEOUT_MS, chromium, site  # noqa: F401 - fixtures
from tests.harness.accessibility import axe_problems
from tests.harness.layout import layout_problems
from tests.vendors_support import active_vendor, vendor_with_contract
from vendors import invoices
from vendors.models import VendorAssignment
from vendors.services import assign_vendor

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EPOCH_TOKEN = 3 * 2**32 + 17
# The longest title and description the new-complaint form takes, each one unbroken word.
LONGEST_TITLE = "Water" + "x" * 195
LONGEST_DESCRIPTION = "Leak" + "y" * (NOTE_MAX_LENGTH - 4)
# A chart label a person reads: its drawn height in CSS pixels (the were 4 px).
READABLE_PX = 9
TITLES = [
    ("Overflowing gutter above the north stairwell", "high"),
    ("Water stain spreading on the lobby ceiling", "normal"),
    ("Broken intercom buzzer at the side entrance", "low"),
    ("Streetlight flickering in the visitor parking", "normal"),
]


@pytest.fixture
def office(alice, olivia, maple, fence_lock):
    """Maple Court with a week of an office's data (module docstring)."""
    units = list(Unit.objects.filter(organization=maple).order_by("label"))
    reporter = Reporter(
        name="Ana Ruiz-Montgomery", email="ana.ruiz-montgomery@example.org", phone="+1 555 0100"
    )
    complaints = [
        open_complaint(
            organization=maple,
            unit=units[n] if n != 3 else None,
            title=title,
            description="The tenant reports it every time it rains; photos in the office inbox.",
            priority=priority,
            reporter=reporter,
            actor=alice,
        )
        for n, (title, priority) in enumerate(TITLES)
    ]
    longest = open_complaint(
        organization=maple,
        unit=units[4],
        title=LONGEST_TITLE,
        description=LONGEST_DESCRIPTION,
        priority="high",
        reporter=Reporter(name="Ana Ruiz", email="ana@example.org", phone="555-0142"),
        actor=alice,
    )
    # The first is overdue: "Needs attention" and the lists say "overdue by …".
    Complaint.objects.filter(pk=complaints[0].pk).update(
        sla_due_at=timezone.now() - timedelta(hours=6, minutes=12)
    )
    gardener = active_vendor("Evergreen Landscaping and Grounds", maple)
    plumber = active_vendor("Pipe Pros Plumbing", maple)
    vendor_with_contract("Summit Roofing", maple, starts_in_days=10, ends_in_days=300)
    assign_vendor(complaint=complaints[1], vendor=gardener, actor=alice)
    assign_vendor(complaint=complaints[2], vendor=plumber, actor=alice)
    second = Complaint.objects.get(pk=complaints[1].pk)
    change_sla(
        complaint=second,
        due_at=second.sla_due_at + timedelta(hours=12),
        reason="Parts on order; the tenant agreed to wait until Thursday afternoon.",
        actor=alice,
    )
    add_note(
        complaint=second,
        note="Tenant is away until Monday; key at the office, ask for the superintendent.",
        actor=alice,
    )
    month = current_month()
    for back in (2, 1):
        generate_monthly_charges(organization=maple, month=add_months(month, -back), actor=alice)
    for outcome in ("committed", "stale", "busy"):
        record_fence_event(
            resource=charge_resource(maple, month),
            outcome=outcome,
            token=EPOCH_TOKEN,
            actor="alice via cli:operations-team-nightly-runner",
            scope=scope_for_organization(maple),
            operation="monthly-charges",
        )
    # Invoices: one waiting with a possible duplicate, one approved with a PDF, one paid.
    assignment = VendorAssignment.objects.get(complaint=complaints[2])
    today = timezone.localdate()
    bill = {
        "assignment": assignment,
        "amount": Decimal("1875.40"),
        "issued_on": today - timedelta(days=12),
        "due_on": today - timedelta(days=2),
        "actor": alice,
    }
    first = invoices.record_invoice(number="PPP-2026-000184/A", **bill).invoice
    invoices.record_invoice(number="PPP-2026-000185/B", **bill)
    invoices.approve_invoice(invoice=first, seen=first.version, actor=olivia)
    return {
        "maple": maple,
        "complaint": second,
        "longest": longest,
        "month": add_months(month, -1),
        "invoice": first,
        "billed": complaints[2],
    }


def staff_pages(facts) -> list[str]:
    org = f"/orgs/{facts['maple'].slug}"
    month = f"{facts['month']:%Y-%m}"
    empty = f"{add_months(current_month(), 1):%Y-%m}"
    return [
        "/orgs/",
        f"{org}/",
        f"{org}/complaints/",
        f"{org}/complaints/?status=unresolved&sort=due",
        f"{org}/complaints/{facts['complaint'].pk}/",
        f"{org}/complaints/{facts['longest'].pk}/",
        f"{org}/complaints/new/",
        f"{org}/charges/",
        f"{org}/charges/{month}/",
        f"{org}/charges/{empty}/",
        f"{org}/vendors/",
        f"{org}/invoices/",
        f"{org}/invoices/?overdue=yes&waiting=me",
        f"{org}/invoices/{facts['invoice'].pk}/",
        f"{org}/complaints/{facts['billed'].pk}/",
        f"{org}/complaints/{facts['billed'].pk}/invoices/new/",
        f"{org}/no-such-page/",
    ]


def operator_pages(facts) -> list[str]:
    resource = charge_resource(facts["maple"], current_month())
    return [
        "/ops/locks/",
        f"/ops/locks/?resource={resource}",
        f"/ops/locks/break/?resource={resource}",
    ]


def sign_in(chromium, site, username: str, width: int):  # noqa: F811
    context = chromium.new_context(viewport={"width": width, "height": 844})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto(f"{site}/accounts/login/?next=/orgs/")
    page.fill("#id_username", username)
    page.fill("#id_password", f"pw-{username}")
    page.click("button[type=submit]")
    page.wait_for_url(f"{site}/orgs/")
    return context, page


def columns_out_of_view(page) -> list[str]:
    """Each table box that hides columns to its side (it scrolls): at 1280 px none may."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.table-wrap')]
          .filter(box => box.scrollWidth > box.clientWidth + 1)
          .map(box => `columns out of view: ${box.scrollWidth} px in ${box.clientWidth} px`)"""
    )


def small_chart_labels(page) -> list[str]:
    """Each chart label drawn smaller than a person reads."""
    return page.evaluate(
        """(least) => [...document.querySelectorAll('svg.chart text')]
          .map(text => [text.textContent, text.getBoundingClientRect().height])
          .filter(([_, height]) => height > 0 && height < least)
          .map(([label, height]) => `chart label "${label}" is ${height.toFixed(1)} px high`)""",
        READABLE_PX,
    )


def shadows_and_badges(page) -> list[str]:
    """A scroll shadow on a table box that does not scroll; a badge ("in order", "not
    started") drawn on two lines (but one that is a sentence, ``.wraps``)."""
    return page.evaluate(
        """() => [
          ...[...document.querySelectorAll('.table-wrap')]
            .filter(box => box.scrollWidth <= box.clientWidth + 1)
            .filter(box => getComputedStyle(box).backgroundImage !== 'none')
            .map(box => `scroll shadow on a table that fits: ${box.textContent.slice(0, 30)}`),
          ...[...document.querySelectorAll('.badge:not(.wraps)')]
            .filter(badge => badge.checkVisibility())
            .filter(badge => badge.getBoundingClientRect().height
                             > 1.6 * parseFloat(getComputedStyle(badge).lineHeight))
            .map(badge => `badge on two lines: "${badge.textContent.trim()}"`),
        ]"""
    )


def problems_here(page) -> list[str]:
    """Everything the walk checks on the page as drawn now."""
    width = page.viewport_size["width"]
    return [
        *layout_problems(page),
        *axe_problems(page),
        *small_chart_labels(page),
        *shadows_and_badges(page),
        *(columns_out_of_view(page) if width >= 1280 else []),
    ]


def walk(page, site, paths) -> dict[str, list[str]]:  # noqa: F811
    found = {}
    for path in paths:
        page.goto(f"{site}{path}")
        problems = problems_here(page)
        if problems:
            found[path] = problems
    return found


def answers(page, site, facts) -> dict[str, list[str]]:  # noqa: F811
    """The pages a form answers with: the 409 of a month whose lease is held (the walk holds
    this month's), the confirmation of an unusual month, a rejected new complaint."""
    org = f"/orgs/{facts['maple'].slug}"
    found = {}
    month = f"{current_month():%Y-%m}"
    page.goto(f"{site}{org}/charges/{month}/")
    page.click(f"form[action='{org}/charges/{month}/generate/'] button")
    page.wait_for_selector("[data-testid=conflict]")
    found["409 of a busy month"] = problems_here(page)
    unusual = f"{add_months(current_month(), -6):%Y-%m}"
    page.goto(f"{site}{org}/charges/{unusual}/")
    page.click(f"form[action='{org}/charges/{unusual}/generate/'] button")
    page.wait_for_selector("[data-testid=confirm-month]")
    found["confirming an unusual month"] = problems_here(page)
    page.goto(f"{site}{org}/complaints/new/")
    # Nothing filled in, past the browser's own checks: a 400 with the form and its errors.
    with page.expect_navigation():
        page.locator("[data-testid=new-complaint]").evaluate(
            "form => { form.noValidate = true; form.requestSubmit(); }"
        )
    page.wait_for_selector(".errorlist")
    found["a new complaint refused"] = problems_here(page)
    return {where: problems for where, problems in found.items() if problems}


@pytest.mark.parametrize("width", [390, 1280])
def test_the_sign_in_pages_are_readable(chromium, site, width):  # noqa: F811
    context = chromium.new_context(viewport={"width": width, "height": 844})
    try:
        page = context.new_page()
        for path in ("/accounts/login/", "/accounts/password_reset/"):
            page.goto(f"{site}{path}")
            assert problems_here(page) == [], path
    finally:
        context.close()


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("username", ["alice", "olivia"])
def test_every_staff_page_is_readable(chromium, site, office, fence_lock, username, width):  # noqa: F811
    context, page = sign_in(chromium, site, username, width)
    paths = staff_pages(office)
    if username == "olivia":
        paths += operator_pages(office)
    else:
        paths.append("/ops/locks/")  # office staff's 403, in the site's error page
    resource = charge_resource(office["maple"], current_month())
    try:
        # A lease held while the pages are read: the lock pages list its holder and the
        # break-lease page shows it.
        with fence_lock.acquire(
            resource, ttl=timedelta(seconds=120), holder="nightly-cron-on-billing-host-7"
        ):
            found = walk(page, site, paths)
            found.update(answers(page, site, office))
    finally:
        context.close()
    assert found == {}, "\n".join(
        f"{path}:\n  " + "\n  ".join(problems) for path, problems in found.items()
    )


def test_a_complaints_card_keeps_its_number_and_labels_its_sla_date(
    chromium,  # noqa: F811
    site,  # noqa: F811
    office,
):
    context, page = sign_in(chromium, site, "alice", 390)
    try:
        page.goto(f"{site}/orgs/{office['maple'].slug}/complaints/")
        row = page.locator(f"tr[data-complaint='{office['longest'].pk}']")
        number, sla = row.locator("td.number"), row.locator("td[data-label='SLA due']")
        assert number.is_visible() and number.inner_text() == str(office["longest"].pk)
        before = "(el) => getComputedStyle(el, '::before').content"
        assert number.evaluate(before) == '"#"'  # read as "#17"
        assert sla.is_visible() and sla.evaluate(before) == '"SLA due "'
    finally:
        context.close()


def test_reassigning_on_the_page_needs_no_box_to_tick(
    chromium,  # noqa: F811
    site,  # noqa: F811
    office,
):
    complaint = office["complaint"]  # Evergreen Landscaping is its vendor
    pipe = active_vendor("Pipe and Drain", office["maple"])
    context, page = sign_in(chromium, site, "alice", 1280)
    try:
        page.goto(f"{site}/orgs/{office['maple'].slug}/complaints/{complaint.pk}/")
        assert page.locator("input[name=reassign]").count() == 0
        page.select_option("select[name=vendor]", str(pipe.pk))
        page.get_by_role("button", name="Assign", exact=True).click()
        page.wait_for_selector(".msg")
        assert page.locator(".current-vendor").inner_text() == "Pipe and Drain"
    finally:
        context.close()
