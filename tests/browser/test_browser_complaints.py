"""The complaint workflow and the lists in a real browser (fixtures of test_browser_staff):
open to closed with notes, filters and search, and the 390 px layouts."""

from datetime import timedelta

import pytest
from django.utils import timezone

from hoa.models import Complaint, ComplaintEvent
from tests.browser.test_browser_staff import chromium, open_as, site  # noqa: F401 - fixtures
from tests.vendors_support import active_vendor

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    # One worker runs the module: its module-scoped Chromium launches once, not once per worker.
    pytest.mark.xdist_group("browser-complaints"),
]

PHONE = {"width": 390, "height": 844}


def choose_status(page, status: str, note: str = "") -> None:
    form = page.locator("[data-testid=status-form]")
    form.locator("select[name=to_status]").select_option(status)
    form.locator("textarea[name=note]").fill(note)
    form.locator("button[type=submit]").click()
    page.wait_for_load_state()


def test_staff_member_takes_a_complaint_from_open_to_closed_with_notes(
    open_as,  # noqa: F811
    site,  # noqa: F811
    alice,
    maple,
):
    complaint = Complaint.objects.create(organization=maple, title="Leaking pipe", priority="high")
    plumber = active_vendor("Ace Plumbing", maple)
    detail = f"{site}/orgs/{maple.slug}/complaints/{complaint.pk}/"
    page = open_as("alice")
    page.goto(detail)
    status = page.locator("[data-testid=status]")
    assert status.inner_text() == "Open"
    # Without a vendor, "in progress" is not offered.
    offered = page.locator("select[name=to_status] option").all_inner_texts()
    assert offered == ["Choose…", "Resolved", "Closed"]

    page.select_option("select[name=vendor]", str(plumber.pk))
    page.click("form[action$='/assign/'] button[type=submit]")
    page.wait_for_url(detail)
    assert status.inner_text() == "Assigned"

    choose_status(page, "in_progress")
    assert status.inner_text() == "In progress"
    page.locator("[data-testid=note-form] textarea").fill("Tenant away until Monday.")
    page.click("[data-testid=note-form] button[type=submit]")
    page.wait_for_load_state()

    choose_status(page, "resolved")  # without the note it needs
    assert page.locator(".errorlist").inner_text() == (
        "Say in a note what was done to resolve the complaint."
    )
    assert Complaint.objects.get(pk=complaint.pk).status == "in_progress"
    page.goto(detail)
    choose_status(page, "resolved", "Valve replaced.")
    assert status.inner_text() == "Resolved"
    choose_status(page, "closed")
    assert status.inner_text() == "Closed"
    assert "by alice on" in page.locator(".facts").inner_text()

    timeline = page.locator("[data-testid=timeline] > li")
    assert timeline.evaluate_all("items => items.map(i => i.dataset.kind)") == [
        "status_changed",
        "status_changed",
        "note",
        "status_changed",
        "status_changed",
        "assignment",
    ]
    assert "Resolved → Closed" in timeline.nth(0).inner_text()
    assert "Valve replaced." in timeline.nth(1).inner_text()
    changes = ComplaintEvent.objects.filter(complaint=complaint, kind="status_changed")
    assert [(e.from_status, e.to_status) for e in changes.order_by("at", "id")] == [
        ("open", "assigned"),
        ("assigned", "in_progress"),
        ("in_progress", "resolved"),
        ("resolved", "closed"),
    ]


def test_staff_member_filters_and_searches_the_complaints(
    open_as,  # noqa: F811
    site,  # noqa: F811
    alice,
    maple,
):
    now = timezone.now()
    Complaint.objects.create(
        organization=maple,
        title="Leaking pipe",
        priority="high",
        sla_due_at=now - timedelta(hours=6),
    )
    Complaint.objects.create(organization=maple, title="Leaking gutter", priority="low")
    Complaint.objects.create(organization=maple, title="Broken gate", priority="high")
    page = open_as("alice")
    page.goto(f"{site}/orgs/{maple.slug}/complaints/")
    rows = page.locator("table.complaints tbody tr")
    assert rows.count() == 3

    page.fill("input[name=q]", "leaking")
    page.select_option("select[name=priority]", "high")
    page.click("[data-testid=filters] button[type=submit]")
    page.wait_for_load_state()

    assert "q=leaking" in page.url and "priority=high" in page.url
    assert rows.count() == 1
    assert "Leaking pipe" in rows.first.inner_text()
    assert "overdue by 6\xa0hours" in rows.first.inner_text()
    assert page.locator("input[name=q]").input_value() == "leaking"  # the form keeps it

    page.select_option("select[name=priority]", "")
    page.select_option("select[name=overdue]", "no")
    page.click("[data-testid=filters] button[type=submit]")
    page.wait_for_load_state()
    assert rows.all_inner_texts()[0].count("Leaking gutter") == 1 and rows.count() == 1


@pytest.mark.parametrize("path", ["complaints/", ""], ids=["complaints", "dashboard"])
def test_the_page_fits_a_390px_phone_without_horizontal_scrolling(
    chromium,  # noqa: F811
    site,  # noqa: F811
    alice,
    maple,
    path,
):
    now = timezone.now()
    for number in range(12):
        Complaint.objects.create(
            organization=maple,
            unit=maple.units.first(),
            title=f"A rather long complaint title number {number} about the parking garage",
            priority="high",
            sla_due_at=now - timedelta(hours=number),
        )
    context = chromium.new_context(viewport=PHONE)
    try:
        page = context.new_page()
        page.goto(f"{site}/accounts/login/?next=/orgs/{maple.slug}/{path}")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "pw-alice")
        page.click("button[type=submit]")
        page.wait_for_url(f"{site}/orgs/{maple.slug}/{path}")

        widths = page.evaluate(
            "[document.documentElement.scrollWidth, window.innerWidth, document.body.scrollWidth]"
        )
        assert widths[0] <= widths[1] == PHONE["width"], widths
        assert widths[2] <= widths[1], widths
    finally:
        context.close()


def test_staff_open_a_complaint_from_the_list_for_a_resident(
    open_as,  # noqa: F811
    site,  # noqa: F811
    alice,
    maple,
):
    page = open_as("alice")
    page.goto(f"{site}/orgs/{maple.slug}/complaints/")
    page.click("[data-testid=new-complaint]")
    form = page.locator("[data-testid=new-complaint]")
    form.locator("select[name=unit]").select_option(label=f"{maple.name} · M004")
    form.locator("input[name=title]").fill("Dripping tap in the laundry room")
    form.locator("textarea[name=description]").fill("Drips all night.")
    form.locator("select[name=priority]").select_option("low")
    form.locator("input[name=reporter_name]").fill("Ana Ruiz")
    form.locator("input[name=reporter_email]").fill("ana@example.org")
    form.locator("button[type=submit]").click()
    page.wait_for_selector("[data-testid=reporter]")

    complaint = Complaint.objects.get()
    assert page.url == f"{site}/orgs/{maple.slug}/complaints/{complaint.pk}/"
    assert "Opened by alice for Ana Ruiz" in page.locator("[data-testid=timeline]").inner_text()
    assert (complaint.unit.label, complaint.priority) == ("M004", "low")


def test_office_staff_see_no_lock_internals_and_an_operator_does(
    open_as,  # noqa: F811
    site,  # noqa: F811
    alice,
    olivia,
    maple,
):
    complaint = Complaint.objects.create(organization=maple, title="Leak")
    for person, operator in (("alice", False), ("olivia", True)):
        page = open_as(person)
        page.goto(f"{site}/orgs/{maple.slug}/")
        assert (page.locator("header nav >> text=Locks").count() == 1) is operator
        assert (page.get_by_text("Recent fenced attempts").count() == 1) is operator
        response = page.goto(f"{site}/ops/locks/")
        assert response.status == (200 if operator else 403)
        page.goto(f"{site}/orgs/{maple.slug}/complaints/{complaint.pk}/")
        assert page.get_by_text("token").count() == 0  # no assignment yet: no token anywhere


@pytest.mark.parametrize("width", [390, 1280])
def test_the_filters_fold_on_a_phone_so_the_list_is_on_the_first_screen(
    chromium,  # noqa: F811
    site,  # noqa: F811
    alice,
    maple,
    width,
):
    Complaint.objects.create(organization=maple, title="Leaking gutter", priority="high")
    context = chromium.new_context(viewport={**PHONE, "width": width})
    try:
        page = context.new_page()
        page.goto(f"{site}/accounts/login/?next=/orgs/{maple.slug}/complaints/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "pw-alice")
        page.click("button[type=submit]")
        page.wait_for_url(f"{site}/orgs/{maple.slug}/complaints/")
        search = page.locator("input[name=q]")
        first_row = page.locator("table.complaints tbody tr").first
        if width == 390:
            assert not search.is_visible()  # folded under "Filters"
            assert first_row.bounding_box()["y"] + 40 < PHONE["height"]
            page.get_by_text("Filters", exact=True).click()
            search.fill("gutter")
            page.click("[data-testid=filters] button[type=submit]")
            page.wait_for_url("**/complaints/?*")
            assert "(in use)" in page.locator("[data-testid=filters-fold] summary").inner_text()
        else:
            assert search.is_visible()  # as wide as a laptop: the filters show, no summary
            assert not page.get_by_text("Filters", exact=True).is_visible()
    finally:
        context.close()
