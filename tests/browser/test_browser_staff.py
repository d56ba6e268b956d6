"""The staff site in a real browser: Playwright drives Debian's Chromium against a live server.

The live server (pytest-django's ``live_server``) runs the app in threads of this test
process against the test database, so settings overrides apply to it and the test can hold
leases and gate the vendor dispatch endpoint while the browser waits for its answer.

Skipped, with a message, only when no Chromium binary exists (``make test`` installs
Debian's ``chromium`` when it runs as root). A browser download cannot work here, so the
executable path is always given.
"""

import os
import re
import shutil
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.demo import staff_group
from hoa.models import Complaint, StaffMembership
from hoa.ops.views import LockStatusView
from locking.operators import holder_of
from vendors.models import Vendor, VendorAssignment, VendorContract

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    # One worker runs the module: its module-scoped Chromium launches once, not once per worker.
    pytest.mark.xdist_group("browser-staff"),
]


CHROMIUM_ARGS = [
    "--no-sandbox",  # root in a container: Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 15_000


def chromium_path() -> str | None:
    for candidate in (
        os.environ.get("CHROMIUM_PATH"),
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        shutil.which("chromium"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="module")
def chromium():
    path = chromium_path()
    if path is None:
        pytest.skip(
            "no Chromium binary (install Debian's chromium or set CHROMIUM_PATH): "
            "browser tests skipped"
        )
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch:
        # Playwright's sync API keeps an event loop in this thread; the ORM calls the tests
        # make between browser steps are plain synchronous code, so Django's async-safety
        # guard (which only sees that a loop exists) must not refuse them. Only while the
        # browser is up.
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
            yield browser
            browser.close()


@pytest.fixture
def site(live_server, settings):
    """The live server's URL, with cookies a plain-HTTP browser session can keep."""
    settings.SESSION_COOKIE_SECURE = False
    settings.CSRF_COOKIE_SECURE = False
    return live_server.url


@pytest.fixture
def open_as(chromium, site):
    """Open a fresh browser context (its own cookies) logged in as a user."""
    contexts = []

    def open_as(username: str):
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.goto(f"{site}/accounts/login/?next=/orgs/")
        page.fill("#id_username", username)
        page.fill("#id_password", f"pw-{username}")
        page.click("button[type=submit]")
        page.wait_for_url(f"{site}/orgs/")
        return page

    yield open_as
    for context in contexts:
        context.close()


def make_staff(django_user_model, username, organization):
    user = django_user_model.objects.create_user(username=username, password=f"pw-{username}")
    user.is_staff = True
    user.save()
    user.groups.add(staff_group())
    StaffMembership.objects.create(user=user, organization=organization)
    return user


def test_staff_member_generates_this_months_charges_and_sees_the_result(
    open_as, site, alice, maple
):
    month = f"{timezone.localdate():%Y-%m}"
    page = open_as("alice")
    page.click(".cards >> text=Maple Court")
    page.wait_for_url(f"{site}/orgs/{maple.slug}/")
    page.click(".subnav >> text=Charges")
    page.wait_for_url(f"{site}/orgs/{maple.slug}/charges/")

    page.click(f"form[action='/orgs/{maple.slug}/charges/{month}/generate/'] button")

    page.wait_for_url(f"{site}/orgs/{maple.slug}/charges/{month}/")
    assert page.locator(".msg.success").count() == 1
    assert page.locator("table.charges tbody tr").count() == 10
    expected_total = sum(Decimal("200.00") + n for n in range(1, 11))
    assert f"${expected_total:,.2f}" in page.locator(".facts").inner_text()
    run = MonthlyChargeRun.objects.get(organization=maple)
    assert run.is_completed and run.total == expected_total
    assert MonthlyCharge.objects.filter(run=run).count() == 10


def test_two_staff_members_assign_different_vendors_at_once_and_the_loser_sees_a_409(
    open_as, site, settings, http_stub, django_user_model, alice, maple
):
    bob = make_staff(django_user_model, "bob", maple)
    complaint = Complaint.objects.create(organization=maple, title="Leaking pipe")
    today = timezone.localdate()
    vendors = {}
    for name in ("Ace Plumbing", "Best Pipes"):
        vendors[name] = Vendor.objects.create(name=name, trade="plumbing")
        VendorContract.objects.create(
            vendor=vendors[name],
            organization=maple,
            starts_on=today - timedelta(days=30),
            ends_on=today + timedelta(days=30),
            insurance_expires_on=today + timedelta(days=365),
        )
    settings.VENDOR_DISPATCH_URL = http_stub.url_for("dispatch")
    # The first dispatch call hangs here: its sender holds the lease until the test says so.
    gate = http_stub.hold()
    detail = f"{site}/orgs/{maple.slug}/complaints/{complaint.pk}/"
    alice_page, bob_page = open_as("alice"), open_as(bob.username)
    for page, vendor in ((alice_page, "Ace Plumbing"), (bob_page, "Best Pipes")):
        page.goto(detail)
        page.select_option("select[name=vendor]", str(vendors[vendor].pk))

    # Alice submits first; the test does not wait for her answer, which cannot come
    # before the gate opens.
    alice_page.locator("form[action$='/assign/']").evaluate("form => form.requestSubmit()")
    gate.wait_arrived(1)
    # Bob submits while Alice's assignment is in flight and her lease is held.
    bob_page.click("form[action$='/assign/'] button[type=submit]")
    bob_page.wait_for_load_state()
    gate.release()
    alice_page.wait_for_selector(".msg, [data-testid=conflict], [data-testid=error]")

    conflict = bob_page.locator("[data-testid=conflict]")
    assert conflict.locator("h1").inner_text() == "Being done right now"
    assert conflict.locator("p.message").inner_text() == (
        f"Another staff member (alice) is assigning a vendor to complaint #{complaint.pk}; "
        "this usually takes a few seconds."
    )
    assert " pid " not in conflict.inner_text()  # the lease's internals are for operators
    assert conflict.locator("button", has_text="Try again").count() == 1
    assert alice_page.url == detail  # 303 back to the complaint
    assert alice_page.locator(".msg.success").count() == 1
    assert "Ace Plumbing" in alice_page.locator("dd.current-vendor").inner_text()
    assignments = VendorAssignment.objects.filter(complaint=complaint)
    assert [(a.vendor.name, a.active) for a in assignments] == [("Ace Plumbing", True)]
    assert len(http_stub.received) == 1  # Bob's attempt never called the dispatch


def test_lock_page_shows_a_lease_held_by_the_test_and_drops_it_once_released(
    open_as, site, monkeypatch, olivia, maple, fence_lock
):
    monkeypatch.setattr(LockStatusView, "refresh_seconds", 1)
    resource = f"monthly-charges:org:{maple.pk}:{timezone.localdate():%Y-%m}"
    lease = fence_lock.acquire(resource, ttl=timedelta(seconds=60), holder="nightly-cron")
    try:
        page = open_as("olivia")  # an operator
        page.click("nav >> text=Locks")
        page.wait_for_url(f"{site}/ops/locks/")
        row = page.locator(f"#holders tr[data-resource='{resource}']")
        assert row.locator("td.holder").inner_text().startswith("nightly-cron on ")
        assert row.locator("td.num").last.inner_text() == str(lease.token)
        page.evaluate("window.stillTheSamePage = true")
    finally:
        lease.release()
    # htmx polls the holders table; the released lease disappears without a reload.
    page.wait_for_selector("#holders >> text=No lock is held right now.")
    assert page.evaluate("window.stillTheSamePage") is True
    assert re.search(r"as of \d\d:\d\d:\d\d", page.locator("#holders h2").inner_text())


def test_an_operator_breaks_a_stuck_lease_and_staff_never_see_the_button(
    open_as, site, django_user_model, maple, fence_lock
):
    from django.contrib.auth.models import Permission

    operator = make_staff(django_user_model, "olga", maple)
    operator.user_permissions.add(Permission.objects.get(codename="break_lease"))
    make_staff(django_user_model, "sam", maple)
    resource = f"monthly-charges:org:{maple.pk}:{timezone.localdate():%Y-%m}"
    lease = fence_lock.acquire(resource, ttl=timedelta(seconds=60), holder="stuck-cron")
    try:
        staff = open_as("sam")
        assert staff.goto(f"{site}/ops/locks/").status == 403  # the operators' page
        assert staff.locator("[data-testid=break-lease]").count() == 0

        page = open_as("olga")
        page.goto(f"{site}/ops/locks/")
        page.click(f"#holders tr[data-resource='{resource}'] [data-testid=break-lease]")
        page.wait_for_selector("text=Held by")
        assert "stuck-cron on " in page.locator("dd.holder").inner_text()
        page.fill("textarea[name=reason]", "cron host hung after a kernel upgrade")
        page.click("button.danger")
        page.wait_for_selector("text=is broken")
        page.wait_for_selector("#holders >> text=No lock is held right now.")
        assert holder_of(resource) is None
    finally:
        lease.release()


def test_an_unusual_month_is_confirmed_then_its_csv_matches_the_database(
    open_as, site, alice, maple
):
    import csv
    import io

    from charges.selectors import add_months, current_month

    month = add_months(current_month(), -2)
    label = f"{month:%Y-%m}"
    page = open_as("alice")
    page.goto(f"{site}/orgs/{maple.slug}/charges/{label}/")
    page.click(f"form[action='/orgs/{maple.slug}/charges/{label}/generate/'] button")

    page.wait_for_selector("[data-testid=confirm-month]")
    assert "is neither this month nor the next" in page.inner_text("main")
    assert not MonthlyChargeRun.objects.exists()  # asked, nothing written yet
    page.click("[data-testid=confirm-month] button.primary")
    page.wait_for_url(f"{site}/orgs/{maple.slug}/charges/{label}/")

    with page.expect_download() as download:
        page.click("[data-testid=csv]")
    path = download.value.path()
    with open(path, encoding="utf-8", newline="") as handle:
        header, *rows = list(csv.reader(io.StringIO(handle.read())))
    run = MonthlyChargeRun.objects.get(organization=maple, month=month)
    assert header == ["unit", "amount", "currency"]
    assert rows == [
        [unit, str(amount), "USD"]
        for unit, amount in run.charges.order_by("unit__label").values_list("unit__label", "amount")
    ]
