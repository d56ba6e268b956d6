"""The staff lists (complaints, charge runs, vendors): filters, search, sort, pages, 400s;
and the SLA state every page computes when it renders, whatever the sweep has done."""

import re
from datetime import date, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from charges.models import MonthlyChargeRun
from hoa.complaints.views import complaint_urls
from hoa.models import Complaint, Organization
from tests.vendors_support import active_vendor
from vendors.models import VendorAssignment

pytestmark = pytest.mark.django_db

S = Complaint.Status


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def complaints_url(slug="maple-court") -> str:
    return reverse("complaints:complaints", args=[slug])


def listed(response) -> list[str]:
    return [c.title for c in response.context["complaints"]]


@pytest.fixture
def board(maple, oak, pipe, green):
    """Maple's complaints: different statuses, priorities, units, vendors and SLA states."""
    now = timezone.now()
    units = {u.label: u for u in maple.units.all()}

    def make(title, unit, *, status=S.OPEN, priority="normal", due_in_hours=24, vendor=None):
        complaint = Complaint.objects.create(
            organization=maple,
            unit=units[unit],
            title=title,
            status=status,
            priority=priority,
            opened_at=now - timedelta(days=2),
            sla_due_at=now + timedelta(hours=due_in_hours),
        )
        if vendor is not None:
            VendorAssignment.objects.create(complaint=complaint, vendor=vendor, fence_token=1)
        return complaint

    made = {
        "leak": make("Leaking pipe", "M001", priority="high", due_in_hours=-6, vendor=pipe),
        "gate": make("Broken gate", "M002", status=S.ASSIGNED, vendor=green),
        "bins": make("Overflowing bins", "M003", priority="low", due_in_hours=-30),
        "light": make("Flickering light", "M004", status=S.RESOLVED, due_in_hours=-50),
        "noise": make("Rooftop noise", "M010", status=S.CLOSED, priority="high"),
    }
    Complaint.objects.create(organization=oak, title="Oak leaking roof")
    return made


# --- filters, search, sort ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (
            {},
            [
                "Rooftop noise",
                "Flickering light",
                "Overflowing bins",
                "Broken gate",
                "Leaking pipe",
            ],
        ),
        ({"status": "open"}, ["Overflowing bins", "Leaking pipe"]),
        ({"status": "unresolved"}, ["Overflowing bins", "Broken gate", "Leaking pipe"]),
        ({"status": "closed"}, ["Rooftop noise"]),
        ({"priority": "high"}, ["Rooftop noise", "Leaking pipe"]),
        # Past the SLA now, though no sweep has run; a resolved complaint's clock stopped.
        ({"overdue": "yes"}, ["Overflowing bins", "Leaking pipe"]),
        ({"overdue": "no"}, ["Rooftop noise", "Flickering light", "Broken gate"]),
        ({"vendor": "none"}, ["Rooftop noise", "Flickering light", "Overflowing bins"]),
        ({"q": "LEAK"}, ["Leaking pipe"]),  # title, any case; not Oak's
        ({"q": "M01"}, ["Rooftop noise"]),  # unit label
        ({"q": "gate", "status": "open"}, []),
        (
            {"sort": "due"},
            [
                "Flickering light",
                "Overflowing bins",
                "Leaking pipe",
                "Broken gate",
                "Rooftop noise",
            ],
        ),
        (
            {"sort": "priority", "status": "unresolved"},
            ["Leaking pipe", "Broken gate", "Overflowing bins"],
        ),
        ({"sort": "title", "overdue": "yes", "priority": "low"}, ["Overflowing bins"]),
    ],
)
def test_complaint_list_filters_searches_and_sorts(alice, board, params, expected):
    response = client_for(alice).get(complaints_url(), params)

    assert response.status_code == 200
    assert listed(response) == expected


def test_filtering_by_vendor_lists_the_complaints_it_handles_now(alice, board, pipe, green):
    client = client_for(alice)

    assert listed(client.get(complaints_url(), {"vendor": pipe.pk})) == ["Leaking pipe"]
    assert listed(client.get(complaints_url(), {"vendor": green.pk})) == ["Broken gate"]


@pytest.mark.parametrize(
    ("params", "sentence"),
    [
        ({"status": "sleeping"}, "Choose a status from the list."),
        ({"priority": "urgent"}, "Choose a priority from the list."),
        ({"overdue": "maybe"}, "Choose past SLA or within SLA."),
        ({"vendor": "abc"}, "Choose a vendor of this association."),
        ({"vendor": "{oak}"}, "Choose a vendor of this association."),
        ({"sort": "id; DROP TABLE"}, "Choose a sort order from the list."),
        ({"q": "x" * 101}, "Search for at most 100 characters."),
    ],
)
def test_a_filter_that_is_not_one_is_400_with_a_sentence(alice, board, oak, params, sentence):
    oakline = active_vendor("Oakline", oak)
    params = {k: v.format(oak=oakline.pk) for k, v in params.items()}

    response = client_for(alice).get(complaints_url(), params)

    assert response.status_code == 400
    html = response.content.decode()
    assert "<h1>Not a filter</h1>" in html and sentence in html
    assert "DROP TABLE" not in html


def test_pages_keep_the_filters_and_a_page_past_the_end_is_the_last(alice, maple):
    for number in range(60):
        Complaint.objects.create(organization=maple, title=f"Leak {number:02d}", priority="high")
    Complaint.objects.create(organization=maple, title="Quiet", priority="low")
    client = client_for(alice)

    first = client.get(complaints_url(), {"priority": "high", "sort": "title"})
    second = client.get(complaints_url(), {"priority": "high", "sort": "title", "page": 2})

    assert listed(first) == [f"Leak {n:02d}" for n in range(50)]
    assert listed(second) == [f"Leak {n:02d}" for n in range(50, 60)]
    assert 'href="?priority=high&amp;sort=title&amp;page=2"' in first.content.decode()
    assert "60 complaints" in first.content.decode()
    # Out of range is the nearest page, never a 404 (tests/pages/test_validation_round.py).
    last = client.get(complaints_url(), {"priority": "high", "sort": "title", "page": "99"})
    assert last.status_code == 200
    assert listed(last) == [f"Leak {n:02d}" for n in range(50, 60)]


def test_complaint_list_queries_stay_bounded_with_50_rows(
    alice, maple, pipe, green, django_assert_max_num_queries
):
    now = timezone.now()
    units = list(maple.units.all())
    for number in range(50):
        complaint = Complaint.objects.create(
            organization=maple,
            unit=units[number % len(units)],
            title=f"Complaint {number}",
            sla_due_at=now + timedelta(hours=number - 25, minutes=30),
        )
        VendorAssignment.objects.create(
            complaint=complaint, vendor=(pipe, green)[number % 2], fence_token=1
        )
    client = client_for(alice)

    # session, user, organization, vendor choices, count, the page (units and vendors
    # joined/annotated), permissions: the same for 50 rows as for 1.
    with django_assert_max_num_queries(8):
        response = client.get(complaints_url(), {"status": "unresolved", "sort": "due"})

    assert response.status_code == 200
    assert len(response.context["complaints"]) == 50
    assert response.content.decode().count('data-sla="overdue"') == 25


# --- the SLA as of now: list, complaint page, dashboard, organization list, admin ----------


@pytest.fixture
def late(maple):
    """Six hours past its SLA; no sweep has run, so nothing recorded a breach."""
    return Complaint.objects.create(
        organization=maple,
        title="Late leak",
        priority="high",
        opened_at=timezone.now() - timedelta(hours=30),
        sla_due_at=timezone.now() - timedelta(hours=6, minutes=5),
    )


def test_an_overdue_complaint_reads_overdue_everywhere_before_any_sweep(client, alice, maple, late):
    assert late.sla_breached_at is None
    client.force_login(alice)
    pages = {
        "list": client.get(complaints_url()),
        "complaint": client.get(reverse("complaints:complaint", args=[maple.slug, late.pk])),
        "dashboard": client.get(reverse("hoa:dashboard", args=[maple.slug])),
    }

    for name, page in pages.items():
        html = page.content.decode()
        assert "overdue by 6\xa0hours" in html, name
        assert "due in 0\xa0minutes" not in html, name
    dashboard = pages["dashboard"].content.decode()
    stats = [int(n) for n in re.findall(r'<span class="num">(\d+)</span>', dashboard)]
    assert stats[1:3] == [1, 1]  # open complaints, open past their SLA
    assert "<b>1</b> past their SLA" in client.get(reverse("hoa:organizations")).content.decode()


def test_the_admin_columns_show_the_sla_as_of_now(client, alice, maple, late):
    on_time = Complaint.objects.create(organization=maple, title="On time")
    client.force_login(alice)
    changelist = reverse("admin:hoa_complaint_changelist")

    page = client.get(changelist).content.decode()
    past = client.get(changelist, {"breached": "yes"})

    # Past the SLA: the warning icon and the words; on time: the words, no icon (the old
    # "past SLA" boolean column showed a green tick for the overdue one).
    assert re.search(
        r'<td class="field-sla"><span class="sla-past"><img src="[^"]*icon-alert.svg" '
        r'alt="Past SLA:"[^>]*> overdue by 6\xa0hours, 5\xa0minutes</span></td>',
        page,
    )
    assert re.search(r'<td class="field-sla">due in \d[^<]*</td>', page)  # on time: no icon
    assert "icon-yes" not in page and "icon-no" not in page
    assert {c.pk for c in past.context["cl"].result_list} == {late.pk}
    assert on_time.pk not in {c.pk for c in past.context["cl"].result_list}


# --- charge runs and vendors -------------------------------------------------------------


def test_charge_runs_filter_by_status_and_a_bad_status_is_400(alice, maple):
    for month in (1, 2, 3):
        MonthlyChargeRun.objects.create(
            organization=maple,
            month=date(2025, month, 1),
            status="completed" if month != 2 else "pending",
            completed_at=timezone.now() if month != 2 else None,
        )
    client = client_for(alice)
    runs = reverse("charges:runs", args=[maple.slug])

    def months(response):
        return [f"{run.month:%Y-%m}" for run in response.context["runs"]]

    assert months(client.get(runs, {"status": "pending"})) == ["2025-02"]
    assert months(client.get(runs, {"status": "completed"})) == ["2025-03", "2025-01"]
    assert months(client.get(runs)) == ["2025-03", "2025-02", "2025-01"]
    bad = client.get(runs, {"status": "lost"})
    assert bad.status_code == 400
    assert "Choose a status from the list." in bad.content.decode()


def test_charge_run_pages_keep_the_status_filter(alice, maple):
    for month in range(30):
        MonthlyChargeRun.objects.create(
            organization=maple,
            month=date(2020 + month // 12, month % 12 + 1, 1),
            status="completed",
            completed_at=timezone.now(),
        )
    page = client_for(alice).get(
        reverse("charges:runs", args=[maple.slug]), {"status": "completed"}
    )

    assert len(page.context["runs"]) == 24
    assert 'href="?status=completed&amp;page=2"' in page.content.decode()


def test_vendors_search_by_name_or_trade_and_a_long_search_is_400(alice, maple, oak):
    active_vendor("Pipe Pros", maple)
    sparks = active_vendor("Bright Spark", maple)
    sparks.trade = "electrical"
    sparks.save()
    active_vendor("Oakline", oak)
    client = client_for(alice)
    vendors = reverse("vendors:vendors", args=[maple.slug])

    def names(response):
        return [c.vendor.name for c in response.context["contracts"]]

    assert names(client.get(vendors, {"q": "pipe"})) == ["Pipe Pros"]
    assert names(client.get(vendors, {"q": "ELECTR"})) == ["Bright Spark"]
    assert names(client.get(vendors, {"q": "oak"})) == []  # another association's
    assert "No vendor matches this search." in client.get(vendors, {"q": "zzz"}).content.decode()
    assert client.get(vendors, {"q": "x" * 101}).status_code == 400


def test_a_rows_link_is_the_complaints_reversed_url(maple):
    urls = complaint_urls(maple)
    for pk in (1, 42, 2**63 - 1):
        assert urls(pk) == reverse("complaints:complaint", args=[maple.slug, pk])
    odd = Organization(slug=f"x-{2**63 - 1}-y")  # the marker in the slug: reversed each time
    assert complaint_urls(odd)(7) == reverse("complaints:complaint", args=[odd.slug, 7])
