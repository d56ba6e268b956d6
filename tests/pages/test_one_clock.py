"""One rule for time (issue 37, item 3; docs/staff-guide.md, "Time zones"):

- staff read their association's zone, labelled, on its pages and in the admin, and an
  input of a time says its zone beside it;
- operators' pages that span associations (the lock page, the admin) and the operators'
  sentences (a command's line, the audit's detail) use ``TIME_ZONE``, labelled, the same in
  every column and detail.

Maple Court is in Los Angeles here and ``TIME_ZONE`` is UTC, so a page in the wrong zone
shows itself. Against the real PostgreSQL and Redis; the last test reads the pages in
Chromium.
"""

import html
import io
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from hoa.jobs.scheduled import sweep_sla
from hoa.models import Complaint, Notice
from locking.models import FenceEvent
from tests.browser.test_browser_staff import TIMEOUT_MS, chromium, site  # noqa: F401 - fixtures
from tests.vendors_support import active_vendor
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)

LOS_ANGELES = ZoneInfo("America/Los_Angeles")
MARKUP = re.compile(r"<(script|style|title)\b.*?</\1>|<[^>]+>", re.S | re.I)
MOMENT = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} ([A-Z]{2,5})")


def pacific() -> str:
    """The abbreviation Los Angeles goes by now (PST in winter, PDT in summer)."""
    return datetime.now(LOS_ANGELES).strftime("%Z")


def text_of(page: str) -> str:
    return " ".join(html.unescape(MARKUP.sub(" ", page)).split())


def zones_shown(page: str) -> set[str]:
    return set(MOMENT.findall(text_of(page)))


@pytest.fixture
def west(maple):
    maple.time_zone = "America/Los_Angeles"
    maple.save()
    return maple


@pytest.fixture
def conflict(west, alice, fence_lock):
    """A complaint whose vendor alice tried to change from a client that showed no page:
    an AlreadyAssigned refusal, audited with the time of the assignment in its detail."""
    complaint = Complaint.objects.create(organization=west, title="Leak under the sink")
    pipe, green = active_vendor("Pipe Pros", west), active_vendor("Evergreen", west)
    assign_vendor(complaint=complaint, vendor=pipe, actor=alice)
    client = Client()
    client.force_login(alice)
    response = client.post(
        f"/orgs/maple-court/complaints/{complaint.pk}/assign/", {"vendor": green.pk}
    )
    assert response.status_code == 409
    return complaint, green


def test_staff_read_their_associations_zone_and_the_sla_input_says_its_zone(alice, west):
    complaint = Complaint.objects.create(
        organization=west, title="Leak", sla_due_at=timezone.now() + timedelta(days=1)
    )
    client = Client()
    client.force_login(alice)

    page = client.get(f"/orgs/maple-court/complaints/{complaint.pk}/").content.decode()

    assert zones_shown(page) == {pacific()}
    zone = re.search(
        r'<span class="zone" id="sla-zone" data-testid="sla-zone">([^<]*)</span>', page
    )
    assert zone and zone[1] == f"America/Los_Angeles ({pacific()})"
    assert 'aria-describedby="sla-zone"' in page


def test_the_sweeps_breach_reads_in_the_associations_zone_on_the_timeline(alice, west):
    due = timezone.now() - timedelta(hours=2)
    complaint = Complaint.objects.create(organization=west, title="Leak", sla_due_at=due)
    sweep_sla()
    client = Client()
    client.force_login(alice)

    text = text_of(client.get(f"/orgs/maple-court/complaints/{complaint.pk}/").content.decode())

    local = due.astimezone(LOS_ANGELES)
    assert f"SLA breached: it was due {local:%Y-%m-%d %H:%M} {pacific()}" in text
    assert "+00:00" not in text and "T" + f"{due:%H:%M}" not in text


def test_the_lock_page_shows_every_time_in_time_zone_columns_details_and_axis(
    olivia, conflict, fence_lock
):
    complaint, _ = conflict
    resource = assignment_resource(complaint.pk)
    fence_lock.acquire(resource, ttl=timedelta(seconds=60), holder="nightly-cron")
    client = Client()
    client.force_login(olivia)

    page = client.get("/ops/locks/", {"resource": resource}).content.decode()

    text = text_of(page)
    detail = FenceEvent.objects.exclude(detail="").get().detail
    assert re.search(r"assigned by alice on \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", detail)
    assert detail in text  # the audit's detail, in the same zone as the At column
    assert zones_shown(page) == {"UTC"}
    assert pacific() not in text
    assert re.search(r"as of \d{2}:\d{2}:\d{2} UTC", text)  # the holders' stamp
    axis = re.search(r'<g class="time-axis">(.*?)</g>', page, flags=re.S)[1]
    assert re.findall(r"\d{2}:\d{2}:\d{2} ([A-Z]+)<", axis) == ["UTC", "UTC"]


def test_the_admin_shows_zones_staff_theirs_operators_time_zone(alice, olivia, conflict):
    complaint, _ = conflict
    change = f"/admin/hoa/complaint/{complaint.pk}/change/"
    for user, zone in ((alice, pacific()), (olivia, "UTC")):
        client = Client()
        client.force_login(user)
        page = client.get(change).content.decode()
        assert zones_shown(page) == {zone}, user.username
        assert "a.m." not in page and "p.m." not in page
        added = client.get("/admin/hoa/notice/add/").content.decode()
        expected = "America/Los_Angeles" if user == alice else "UTC"
        assert f"Time zone: {expected}" in added, user.username


def test_a_time_typed_in_the_admin_is_read_in_the_zone_it_says(alice, west):
    client = Client()
    client.force_login(alice)

    response = client.post(
        "/admin/hoa/notice/add/",
        {
            "organization": west.pk,
            "title": "Water off on Friday",
            "body": "",
            "publish_at_0": "2027-01-15",
            "publish_at_1": "09:00:00",
        },
    )

    assert response.status_code == 302, response.content.decode()[-2000:]
    # 09:00 in Los Angeles in January is PST (UTC-8): 17:00 UTC.
    assert Notice.objects.get().publish_at == datetime(2027, 1, 15, 17, 0, tzinfo=UTC)


def test_command_messages_use_time_zone_labelled(conflict, settings):
    complaint, green = conflict
    with pytest.raises(CommandError) as refused:
        call_command("assign_vendor", "--complaint", str(complaint.pk), "--vendor", str(green.pk))
    assert re.search(r"assigned by alice on \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", str(refused.value))
    assert pacific() not in str(refused.value)

    settings.TIME_ZONE = "America/New_York"
    out = io.StringIO()
    call_command("prune_access_denials", "--dry-run", stdout=out)
    assert re.search(r"\(before \d{4}-\d{2}-\d{2} \d{2}:\d{2} E[SD]T\)", out.getvalue())


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("width", [390, 1280])
def test_in_the_browser_the_sla_input_shows_its_zone_beside_it_and_the_lock_page_one_zone(
    chromium,  # noqa: F811
    site,  # noqa: F811
    olivia,
    conflict,
    width,
):
    complaint, _ = conflict
    context = chromium.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    try:
        page = context.new_page()
        page.goto(f"{site}/accounts/login/")
        page.fill("#id_username", "olivia")
        page.fill("#id_password", "pw-olivia")
        page.click("button[type=submit]")
        page.wait_for_url(f"{site}/orgs/maple-court/")  # her one association
        page.goto(f"{site}/orgs/maple-court/complaints/{complaint.pk}/")
        field = page.locator("#id_due_at").bounding_box()
        zone = page.locator("[data-testid=sla-zone]")
        assert zone.inner_text() == f"America/Los_Angeles ({pacific()})"
        box = zone.bounding_box()
        # Beside the input: on its line, or on the line right below it, within its width.
        assert box["y"] < field["y"] + field["height"] + 24 and box["x"] < field["x"] + 440
        assert set(MOMENT.findall(page.inner_text("main"))) == {pacific()}

        page.goto(f"{site}/ops/locks/?resource={assignment_resource(complaint.pk)}")
        shown = page.inner_text("main")
        assert set(MOMENT.findall(shown)) == {"UTC"} and pacific() not in shown
    finally:
        context.close()


@pytest.mark.browser
@pytest.mark.slow
def test_in_an_en_us_browser_the_sla_input_reads_and_takes_iso_24_hour_time(
    chromium,  # noqa: F811
    site,  # noqa: F811
    alice,
    west,
):
    """A datetime-local input is drawn in the browser's locale ("11/21/2026, 04:05 PM" in
    en-US) and refuses "2026-11-21 16:05" typed into it; the SLA input is text, ISO 24-hour
    like every other time of the site, whatever the browser's locale."""
    due = timezone.now().astimezone(LOS_ANGELES).replace(hour=16, minute=5, second=0, microsecond=0)
    due += timedelta(days=1)
    complaint = Complaint.objects.create(organization=west, title="Leak", sla_due_at=due)
    context = chromium.new_context(locale="en-US", timezone_id="America/New_York")
    context.set_default_timeout(TIMEOUT_MS)
    try:
        page = context.new_page()
        page.goto(f"{site}/accounts/login/?next=/orgs/maple-court/complaints/{complaint.pk}/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "pw-alice")
        page.click("button[type=submit]")
        page.wait_for_url(f"{site}/orgs/maple-court/complaints/{complaint.pk}/")
        assert page.evaluate("navigator.language") == "en-US"
        field = page.locator("#id_due_at")
        assert field.input_value() == f"{due:%Y-%m-%d} 16:05"
        assert field.get_attribute("placeholder") == "YYYY-MM-DD HH:MM"

        later = due + timedelta(days=1, hours=1, minutes=25)  # 17:30 the next day
        field.fill(f"{later:%Y-%m-%d %H:%M}")
        page.fill("#id_reason", "Parts on order")
        page.click("[data-testid=sla-form] button[type=submit]")
        page.wait_for_load_state()
        assert Complaint.objects.get(pk=complaint.pk).sla_due_at == later
        assert page.locator("#id_due_at").input_value() == f"{later:%Y-%m-%d} 17:30"
    finally:
        context.close()
