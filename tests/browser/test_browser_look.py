"""What staff see, in a real Chromium: the 409 page in their words, tables that are not cut
off (the dashboard at 1280 px, admin changelists at 1280 and 390 px).

Uses the launch fixtures and live server of ``tests/browser/test_browser_staff.py``.
"""

import socket
from datetime import timedelta

import pytest
from django.utils import timezone

from charges.operations import charge_resource
from hoa.models import Complaint, scope_for_organization
from locking.audit import record_fence_event
from tests.browser.test_browser_staff import chromium, open_as, site  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    # One worker runs the module: its module-scoped Chromium launches once, not once per worker.
    pytest.mark.xdist_group("browser-look"),
]


def current_month():
    return timezone.localdate().replace(day=1)


# A token after a few counter losses (epoch * 2**32 + sequence), as the dashboard shows it.
EPOCH_TOKEN = 3 * 2**32 + 1


def test_busy_409_names_the_colleague_offers_a_retry_and_shows_no_lock_internals(
    open_as,  # noqa: F811
    site,  # noqa: F811
    fence_lock,
    alice,
    maple,
    django_user_model,
):
    django_user_model.objects.create_user(username="bob", password="pw-bob")
    month = current_month()
    page = open_as("alice")
    page.goto(f"{site}/orgs/{maple.slug}/charges/")

    with fence_lock.acquire(charge_resource(maple, month), ttl=timedelta(seconds=60), holder="bob"):
        page.click(f"form[action='/orgs/{maple.slug}/charges/{month:%Y-%m}/generate/'] button")
        page.wait_for_selector("[data-testid=conflict]")

        conflict = page.locator("[data-testid=conflict]")
        text = conflict.inner_text()
        assert (
            f"Another staff member (bob) is generating the charges for Maple Court, "
            f"{month:%B %Y}; this usually takes a few seconds."
        ) in text
        assert page.get_by_role("button", name="Try again").is_visible()
        for operator_fact in ("token", "pid", socket.gethostname(), "fencing", "expires"):
            assert operator_fact not in text.lower()
        # The lock page is the operators': office staff get no link to it.
        assert page.get_by_role("link", name="Details for operators").count() == 0
        assert page.title().endswith(" · HOA")


def test_dashboard_token_column_is_in_view_at_1280_px(
    open_as,  # noqa: F811
    site,  # noqa: F811
    olivia,
    maple,
):
    for outcome in ("stale", "busy", "committed"):
        record_fence_event(
            resource=charge_resource(maple, current_month()),
            outcome=outcome,
            token=EPOCH_TOKEN,
            actor="alice via cli:operations-team-nightly-runner",
            scope=scope_for_organization(maple),
            operation="monthly-charges",
        )
    page = open_as("olivia")  # 1280 x 900; the fenced attempts are an operator's to read
    page.goto(f"{site}/orgs/{maple.slug}/")

    cells = page.locator("td.num", has_text=str(EPOCH_TOKEN))
    assert cells.count() == 3
    for index in range(3):
        cell = cells.nth(index).bounding_box()
        box = cells.nth(index).locator("xpath=ancestor::div[@class='table-wrap']").bounding_box()
        assert cell["x"] + cell["width"] <= box["x"] + box["width"] + 0.5
    assert page.title() == "Overview · Maple Court · HOA"


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("changelist", ["/admin/locking/fenceevent/", "/admin/hoa/complaint/"])
def test_admin_changelists_fit_or_scroll_in_their_box_never_the_page(
    chromium,  # noqa: F811
    site,  # noqa: F811
    root,
    maple,
    changelist,
    width,
):
    record_fence_event(
        resource=charge_resource(maple, current_month()),
        outcome="committed",
        token=EPOCH_TOKEN,
        actor="alice via cli:operations-team-nightly-runner",
        scope=scope_for_organization(maple),
        operation="monthly-charges",
    )
    Complaint.objects.create(organization=maple, title="Water stain on the lobby ceiling")
    context = chromium.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{site}/admin/login/?next={changelist}")
        page.fill("#id_username", "root")
        page.fill("#id_password", "pw-root")
        page.click("input[type=submit]")
        page.wait_for_selector("#result_list")

        fit = page.evaluate(
            """() => {
              const box = document.querySelector('#changelist-form .results');
              const table = document.querySelector('#result_list');
              return {
                overflow: getComputedStyle(box).overflowX,
                boxRight: box.getBoundingClientRect().right,
                tableWidth: table.getBoundingClientRect().width,
                boxWidth: box.clientWidth,
                pageWidth: document.documentElement.scrollWidth,
              };
            }"""
        )
        assert fit["pageWidth"] <= width  # the page itself never scrolls sideways
        assert fit["boxRight"] <= width
        if width == 1280:  # beside the navigation and the filters: every column in view
            assert fit["tableWidth"] <= fit["boxWidth"] + 0.5
        else:  # a phone: the table scrolls inside its own box
            assert fit["overflow"] == "auto"
        favicon = page.locator("link[rel=icon]").get_attribute("href")
        assert favicon.endswith("hoa/favicon.svg")
    finally:
        context.close()


def test_the_lock_pages_counters_fit_a_390px_phone_without_a_sideways_scroll(
    chromium,  # noqa: F811
    site,  # noqa: F811
    olivia,
    maple,
):
    record_fence_event(
        resource=charge_resource(maple, current_month()),
        outcome="committed",
        token=EPOCH_TOKEN,
        actor="olivia",
        scope=scope_for_organization(maple),
        operation="monthly-charges",
    )
    context = chromium.new_context(viewport={"width": 390, "height": 844})
    try:
        page = context.new_page()
        page.goto(f"{site}/accounts/login/?next=/ops/locks/")
        page.fill("#id_username", "olivia")
        page.fill("#id_password", "pw-olivia")
        page.click("button[type=submit]")
        page.wait_for_url(f"{site}/ops/locks/")
        box = page.locator("#counters .table-wrap")
        scroll, client = box.evaluate("box => [box.scrollWidth, box.clientWidth]")
        assert scroll <= client, (scroll, client)
        assert f"monthly-charges:org:{maple.pk}:" in box.inner_text()
    finally:
        context.close()
