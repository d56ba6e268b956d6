"""One way to show a moment and a month on every staff and operator page (issue 25 item 6).

A moment is ``2026-12-03 17:44 EST`` (``hoa.dates.when``: the association's zone, with its
abbreviation); a day (a contract's first and last) is the moment's date part, ``2026-12-03``;
a month is ``December 2026``; ``YYYY-MM`` is for URLs, CSV files and resource names only.
The pages are read as text, the way a person reads them: tags, attributes (URLs,
``datetime=``) and scripts removed; what is left must hold no other shape of a date or a
time.
"""

import html
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import formats, timezone, translation

from charges.operations import charge_resource
from charges.selectors import add_months, current_month
from charges.services import generate_monthly_charges
from hoa import dates
from hoa.complaints.workflow import Reporter, add_note, change_sla, open_complaint
from hoa.models import Unit, scope_for_organization
from locking.audit import record_fence_event
from tests.vendors_support import active_vendor
from vendors.services import assign_vendor

# The services run their fenced steps outside any test transaction, as in production.
fenced = pytest.mark.django_db(transaction=True)

MARKUP = re.compile(r"<(script|style|title)\b.*?</\1>|<[^>]+>", re.DOTALL | re.IGNORECASE)
MOMENT = re.compile(r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2} (?:[A-Z]{2,5}|[+-]\d{2}(?:\d{2})?)(?!\w)")
# A lock's resource name (``monthly-charges:org:1:2026-10``) is an identifier, as a URL is.
RESOURCE = re.compile(r"\b[a-z][a-z0-9-]*:\S+")
DAY = re.compile(r"\b\d{4}-\d{2}-\d{2}\b(?![T:\d])")
MONTH = re.compile(
    r"\b(?:January|February|March|April|May|June|July|August|September|October|November"
    r"|December) \d{4}\b"
)
OTHER_SHAPES = {
    "a month in digits": re.compile(r"\b\d{4}-\d{2}\b"),
    "an ISO timestamp": re.compile(r"\d{4}-\d{2}-\d{2}T\d"),
    "a month abbreviated or a day after a month": re.compile(
        r"\b(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.?\s+\d{1,2}\b"
        r"|\b(?:January|February|March|April|May|June|July|August|September|October"
        r"|November|December)\s+\d{1,2}(?!\d)"
    ),
    "a time of day outside a moment": re.compile(
        r"\b\d{1,2}:\d{2}(?::\d{2})?\b|\b\d{1,2}\s*[ap]\.?m\.?(?!\w)", re.IGNORECASE
    ),
    "a date with slashes": re.compile(r"\b\d{1,2}/\d{1,2}/\d{2,4}\b"),
}


def visible_text(page: str) -> str:
    return " ".join(html.unescape(MARKUP.sub(" ", page)).split())


# The operators' lock page works in seconds (leases of 30 s, a panel refreshed every 5 s):
# its "as of" stamp and its timeline's axis show the time of day to the second, and that
# is the one exception.
SECONDS = re.compile(r"\b\d{2}:\d{2}:\d{2}\b")


def other_shapes(text: str, *, seconds: bool = False) -> list[str]:
    """Each piece of ``text`` that shows a date or time some other way than the one way
    (with ``seconds``, a time of day to the second is allowed: the lock page's)."""
    rest = text
    for known in (RESOURCE, MOMENT, MONTH, DAY, *([SECONDS] if seconds else [])):
        rest = known.sub(" ", rest)
    return [
        f"{name}: {match.group()!r} in …{rest[max(match.start() - 40, 0) : match.end() + 40]}…"
        for name, shape in OTHER_SHAPES.items()
        for match in shape.finditer(rest)
    ]


ZONES = ["UTC", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "Europe/Dublin",
         "America/St_Johns", "Pacific/Chatham"]  # fmt: skip


@pytest.mark.parametrize("zone", ZONES)
def test_when_writes_what_djangos_formatter_writes(zone):
    # Every half hour around 2026's clock changes, north and south (the repeated hour: no
    # abbreviation, as Django's ``T``), a year below 1000, microseconds.
    starts = [datetime(2026, month, day, tzinfo=UTC)
              for month, day in ((3, 7), (3, 28), (4, 3), (10, 3), (10, 24), (10, 31))]  # fmt: skip
    moments = [start + timedelta(minutes=30 * n) for start in starts for n in range(48 * 3)]
    moments += [datetime(999, 1, 2, 3, 4, 5, 6789, tzinfo=UTC), datetime.now(UTC)]
    with timezone.override(ZoneInfo(zone)), translation.override("fr"):
        for moment in moments:
            django = formats.date_format(timezone.localtime(moment), dates.MOMENT)
            assert dates.when(moment) == django
            assert dates.when(moment.astimezone(ZoneInfo("Asia/Tokyo"))) == django
        repeated = [moment for moment in moments if dates.when(moment).endswith(" ")]
    assert bool(repeated) == (zone not in ("UTC", "Asia/Kolkata"))
    assert dates.when(None) == ""


def test_the_shape_check_finds_every_other_way_and_passes_the_one_way():
    """Control."""
    assert other_shapes("Opened 2026-12-03 17:44 EST, billed for December 2026.") == []
    assert other_shapes("At 2026-12-03 17:44 +0530 by alice.") == []
    assert other_shapes("Contract from 2026-11-04 to 2027-01-03.") == []
    assert other_shapes("Lease on monthly-charges:org:1:2026-10 held.") == []
    assert other_shapes("Held now as of 22:46:03", seconds=True) == []
    assert other_shapes("Held now as of 22:46:03") != []
    found = other_shapes(
        "Dec. 3, 2026 · 2026-12 · 2026-12-03 · 5:30 p.m. · 17:44 · 2026-12-03T17:44 · "
        "12/03/2026 · December 3 · 2026-12-03 17:44 · 2026-12-03 5 p.m."
    )
    names = {line.partition(":")[0] for line in found}
    assert names == set(OTHER_SHAPES)
    assert len(found) >= 9


@pytest.fixture
def office(alice, olivia, maple, fence_lock):
    """An association with complaints, a timeline, assignments, charge runs and fenced
    attempts: every kind of moment and month the pages show."""
    units = list(Unit.objects.filter(organization=maple).order_by("label"))
    complaint = open_complaint(
        organization=maple,
        unit=units[0],
        title="Water stain spreading on the lobby ceiling",
        description="Photos in the office inbox.",
        priority="high",
        reporter=Reporter(name="Ana Ruiz", email="ana@example.org", phone=""),
        actor=alice,
    )
    assign_vendor(complaint=complaint, vendor=active_vendor("Pipe Pros", maple), actor=alice)
    complaint.refresh_from_db()
    change_sla(
        complaint=complaint,
        due_at=complaint.sla_due_at + timedelta(hours=12),
        reason="Parts on order.",
        actor=alice,
    )
    add_note(complaint=complaint, note="Key at the office.", actor=alice)
    month = current_month()
    for back in (2, 1):
        generate_monthly_charges(organization=maple, month=add_months(month, -back), actor=alice)
    record_fence_event(
        resource=charge_resource(maple, month),
        outcome="stale",
        token=7,
        actor="alice",
        scope=scope_for_organization(maple),
        operation="monthly-charges",
    )
    return {"maple": maple, "complaint": complaint, "month": add_months(month, -1)}


@fenced
def test_every_staff_and_operator_page_shows_moments_and_months_one_way(
    client, alice, olivia, office
):
    org = f"/orgs/{office['maple'].slug}"
    staff = [
        "/orgs/",
        f"{org}/",
        f"{org}/complaints/",
        f"{org}/complaints/{office['complaint'].pk}/",
        f"{org}/charges/",
        f"{org}/charges/{office['month']:%Y-%m}/",
        f"{org}/vendors/",
    ]
    resource = charge_resource(office["maple"], current_month())
    operators = ["/ops/locks/", f"/ops/locks/?resource={resource}"]
    found = {}
    for user, paths, seconds in ((alice, staff, False), (olivia, operators, True)):
        client.force_login(user)
        for path in paths:
            response = client.get(path)
            assert response.status_code == 200, path
            text = visible_text(response.content.decode())
            assert any(s.search(text) for s in (MOMENT, DAY, MONTH)), f"{path} shows no date"
            if problems := other_shapes(text, seconds=seconds):
                found[path] = problems
    assert found == {}, "\n".join(f"{p}: {x}" for p, xs in found.items() for x in xs)
