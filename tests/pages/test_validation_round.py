"""Issue 25, item 7: the loose ends of validation.

- An SLA due time after opening and at most a year ahead, in ASCII digits, without control
  characters; otherwise a 400 that changes nothing.
- A page number out of range is the nearest page; one that is not a number is a 400;
  never a 404 — on every paginated staff and operator list.
- Every ``/ops/locks/`` filter is validated alike (operation names from the registry).
- A month outside the billing window offers no Generate button; POSTing there is a 400
  that says so in the association's layout.
- Non-canonical ids (``01``, ``+1``, `` 1``) are a 404 on every id route of the product.
"""

import re
from datetime import date, timedelta

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.urls.converters import IntConverter
from django.utils import timezone

from charges.forms import billing_window
from charges.models import MonthlyChargeRun
from charges.selectors import add_months
from hoa.complaints.workflow import SLA_MAX_AHEAD
from hoa.models import Complaint, ComplaintEvent
from hoa.operations import operations
from hoa.web.fields import CanonicalIdConverter
from locking.models import FenceEvent
from tests.vendors_support import active_vendor


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(
        organization=maple, unit=maple.units.first(), title="Leaking pipe", priority="high"
    )


def written(complaint) -> tuple:
    row = Complaint.objects.get(pk=complaint.pk)
    events = tuple(ComplaintEvent.objects.filter(complaint=complaint).values_list("pk", "kind"))
    return row.status, row.sla_due_at, events


def keeps_the_association_layout(html: str, name: str = "Maple Court") -> bool:
    """The page extends the association's layout: its name and its navigation."""
    subnav = html.split('<nav class="subnav"', 1)
    if len(subnav) != 2:
        return False
    return f"<strong>{name}</strong>" in subnav[1] and "Complaints" in subnav[1]


# -- the SLA due time ----------------------------------------------------------------------


def seen_due(complaint) -> dict:
    due = Complaint.objects.get(pk=complaint.pk).sla_due_at
    return {"seen_due": int(due.timestamp()) if due else 0}


def sla_url(complaint) -> str:
    return reverse("complaints:sla", args=[complaint.organization.slug, complaint.pk])


@pytest.mark.parametrize(
    ("due_at", "reason", "sentence"),
    [
        ("9999-12-31T23:59", "Parts on order", "must be at most a year ahead"),
        ("{a year and a day}", "Parts on order", "must be at most a year ahead"),
        ("\uff12\uff10\uff12\uff17-01-05T10:00", "Parts on order", "as a date and a time"),
        ("2027-01-05T10:00\x00", "Parts on order", "as a date and a time"),
        ("2027-01-05T1\x1b0:00", "Parts on order", "as a date and a time"),
        ("2027-01-05T10:00", "Parts\x1b on order", "Remove the control characters"),
    ],
    ids=["year-9999", "past-a-year", "full-width", "trailing-nul", "escape", "escape-in-reason"],
)
def test_a_bad_sla_due_time_is_400_and_changes_nothing(complaint, alice, due_at, reason, sentence):
    if due_at == "{a year and a day}":
        due_at = f"{timezone.localtime(timezone.now() + timedelta(days=366)):%Y-%m-%dT%H:%M}"
    before = written(complaint)

    response = client_for(alice).post(
        sla_url(complaint), {"due_at": due_at, "reason": reason, **seen_due(complaint)}
    )

    assert response.status_code == 400
    assert sentence in response.content.decode()
    assert written(complaint) == before


def test_an_sla_due_time_within_a_year_is_accepted(complaint, alice):
    assert timedelta(days=365) == SLA_MAX_AHEAD
    due = timezone.localtime(timezone.now() + timedelta(days=364)).replace(second=0, microsecond=0)

    response = client_for(alice).post(
        sla_url(complaint),
        {"due_at": f"{due:%Y-%m-%dT%H:%M}", "reason": "Parts on order", **seen_due(complaint)},
    )

    assert response.status_code == 303
    complaint.refresh_from_db()
    assert complaint.sla_due_at == due


def test_the_year_is_counted_from_now_in_the_sentence(complaint, alice):
    response = client_for(alice).post(
        sla_url(complaint), {"due_at": "9999-12-31T23:59", "reason": "x", **seen_due(complaint)}
    )
    latest = timezone.localtime(timezone.now() + SLA_MAX_AHEAD)
    assert f"(by {latest:%Y-%m-%d}" in response.content.decode()


# -- page numbers ----------------------------------------------------------------------------


@pytest.fixture
def long_lists(maple):
    """Two pages of complaints (50 a page), of vendors (50) and of charge runs (24)."""
    Complaint.objects.bulk_create(
        Complaint(organization=maple, title=f"Leak {n:02d}", sla_due_at=timezone.now())
        for n in range(55)
    )
    for n in range(52):
        active_vendor(f"Vendor {n:02d}", maple)
    MonthlyChargeRun.objects.bulk_create(
        MonthlyChargeRun(organization=maple, month=add_months(date(2020, 1, 1), n))
        for n in range(30)
    )


LISTS = [
    ("complaints:complaints", "complaints"),
    ("vendors:vendors", "contracts"),
    ("charges:runs", "runs"),
]


@pytest.mark.parametrize(("url_name", "rows"), LISTS)
@pytest.mark.parametrize(
    ("page", "expected"),
    [("99", 2), ("3", 2), ("99999999999999999999999", 2), ("0", 1), ("-4", 1), ("", 1)],
)
def test_a_page_out_of_range_is_the_nearest_page(long_lists, alice, url_name, rows, page, expected):
    response = client_for(alice).get(reverse(url_name, args=["maple-court"]), {"page": page})

    assert response.status_code == 200
    assert response.context["page_obj"].number == expected
    assert len(response.context[rows]) > 0
    assert f"Page {expected} of 2" in response.content.decode()


@pytest.mark.parametrize(("url_name", "rows"), LISTS)
@pytest.mark.parametrize("page", ["abc", "\uff12", " 1", "1.0", "2\x00", "last", "+1"])
def test_a_page_that_is_not_a_number_is_400_in_the_associations_layout(
    long_lists, alice, url_name, rows, page
):
    response = client_for(alice).get(reverse(url_name, args=["maple-court"]), {"page": page})

    html = response.content.decode()
    assert response.status_code == 400
    assert "<h1>Not a page</h1>" in html
    assert "is not a page number: use digits, e.g. page=2." in html
    assert keeps_the_association_layout(html)


def fenced_attempts(maple, count: int) -> None:
    FenceEvent.objects.bulk_create(
        FenceEvent(
            resource=f"monthly-charges:org:{maple.pk}:2026-{1 + n % 12:02d}",
            operation="monthly-charges",
            token=n + 1,
            outcome="committed",
            actor="alice",
            scope=f"org:{maple.pk}",
        )
        for n in range(count)
    )


@pytest.mark.parametrize(("page", "expected"), [("99", 2), ("0", 1), ("-1", 1), ("2", 2)])
def test_the_lock_page_clamps_its_page_too(maple, olivia, page, expected):
    fenced_attempts(maple, 60)  # 50 a page

    response = client_for(olivia).get("/ops/locks/", {"page": page})

    assert response.status_code == 200
    assert response.context["page"].number == expected
    assert f"Page {expected} of 2" in response.content.decode()


@pytest.mark.parametrize("page", ["abc", "\uff12", " 2"])
def test_the_lock_page_answers_400_to_a_page_that_is_not_a_number(maple, olivia, page):
    fenced_attempts(maple, 60)

    response = client_for(olivia).get("/ops/locks/", {"page": page})

    assert response.status_code == 400
    assert "is not a page number" in response.content.decode()


# -- the lock page's filters -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "sentence"),
    [
        ({"operation": "bogus"}, "Operation: Choose an operation from the list."),
        ({"outcome": "bogus"}, "Outcome: Choose an outcome from the list."),
        ({"operation": "monthly-charges\x00"}, "Operation: Choose an operation from the list."),
        ({"resource": "has space"}, "Resource: resource name must be printable"),
    ],
)
def test_every_lock_page_filter_is_validated_alike(maple, olivia, query, sentence):
    fenced_attempts(maple, 3)

    response = client_for(olivia).get("/ops/locks/", query)

    assert response.status_code == 400
    assert sentence in response.content.decode()


def test_the_operation_filter_offers_the_registered_operations(maple, olivia):
    fenced_attempts(maple, 3)
    client = client_for(olivia)

    html = client.get("/ops/locks/").content.decode()
    select = html.split('name="operation"', 1)[1].split("</select>", 1)[0]
    offered = re.findall(r'<option value="([^"]*)"', select)
    assert offered == ["", *(operation.name for operation in operations())]
    assert {"monthly-charges", "vendor-assignment"} <= set(offered)
    table = client.get("/ops/locks/", {"operation": "vendor-assignment"}).content.decode()
    assert "No fenced attempt matches these filters." in table
    shown = client.get("/ops/locks/", {"operation": "monthly-charges"})
    assert shown.status_code == 200
    assert len(shown.context["page"].object_list) == 3


# -- a month outside the billing window ---------------------------------------------------------


@pytest.fixture
def window(settings):
    """The production defaults (the test run widens the window: pyproject.toml)."""
    settings.CHARGE_MONTHS_BACK, settings.CHARGE_MONTHS_AHEAD = 24, 3


def test_a_month_outside_the_window_offers_no_generate_button(window, alice, maple):
    first, last = billing_window()
    outside = add_months(last, 1)
    client = client_for(alice)

    page = client.get(f"/orgs/maple-court/charges/{outside:%Y-%m}/")
    inside = client.get(f"/orgs/maple-court/charges/{last:%Y-%m}/")

    html = page.content.decode()
    assert page.status_code == 200
    assert "Generate charges for" not in html
    assert "is outside the billing window" in html
    assert f"{first:%B %Y} to {last:%B %Y}" in html
    assert "Generate charges for" in inside.content.decode()
    assert "is outside the billing window" not in inside.content.decode()


def test_generating_outside_the_window_is_400_in_the_associations_layout(window, alice, maple):
    assert billing_window()[1] < date(2030, 1, 1)
    response = client_for(alice).post(
        "/orgs/maple-court/charges/2030-01/generate/", {"confirm": "yes"}
    )

    html = response.content.decode()
    assert response.status_code == 400
    assert "<h1>Outside the billing window</h1>" in html
    assert "2030-01 is outside the billing window" in html
    assert "Not a month" not in html
    assert keeps_the_association_layout(html)
    assert "<title>Outside the billing window · Maple Court · HOA</title>" in html
    assert MonthlyChargeRun.objects.count() == 0


# -- canonical ids --------------------------------------------------------------------------


@pytest.mark.parametrize("segment", ["01", "+1", "%201", "1%20", "%EF%BC%91", "0", "-1", "1.0"])
def test_a_non_canonical_complaint_id_is_404(complaint, alice, segment):
    # The same spelling of this complaint's id, each way a client might write it.
    written_id = segment.replace("1", str(complaint.pk), 1) if segment != "0" else "0"
    if segment == "%EF%BC%91":
        written_id = "".join(chr(0xFF10 + int(d)) for d in str(complaint.pk))
    client = client_for(alice)
    base = "/orgs/maple-court/complaints/"

    assert client.get(f"{base}{complaint.pk}/").status_code == 200
    for tail in ("", "status/", "notes/", "sla/", "assign/"):
        assert client.get(f"{base}{written_id}/{tail}").status_code == 404, (written_id, tail)
        assert client.post(f"{base}{written_id}/{tail}", {"note": "x"}).status_code == 404
    assert ComplaintEvent.objects.count() == 0


def test_an_id_past_a_bigint_is_404(alice, maple):
    response = client_for(alice).get(f"/orgs/maple-court/complaints/{2**63}/")
    assert response.status_code == 404


def _routes(resolver: URLResolver, prefix: str = ""):
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _routes(entry, route)
        elif isinstance(entry, URLPattern):
            yield route, entry.pattern.converters


def test_every_id_route_of_the_product_uses_the_canonical_converter():
    routes = [(r, c) for r, c in _routes(get_resolver()) if not r.startswith("admin/")]
    id_routes = [r for r, converters in routes if "pk" in converters]

    assert "orgs/<slug:org_slug>/complaints/<id:pk>/" in id_routes
    assert "orgs/<slug:org_slug>/complaints/<id:pk>/assign/" in id_routes
    for route, converters in routes:
        assert not any(isinstance(c, IntConverter) for c in converters.values()), route
        if "pk" in converters:
            assert isinstance(converters["pk"], CanonicalIdConverter), route
