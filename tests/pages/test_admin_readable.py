"""The admin as the office reads it (issue 25, item 9): the complaint changelist's SLA column
says what its icon means, months read "December 2026", amounts carry the currency; and the
complaint changelist at 1280 px has no crushed column or split word (``tests.harness.layout``).

Rendered by the test client against the real database; the last tests in a real Chromium.
"""

import re
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.models import Complaint, Unit
from tests.browser.test_browser_staff import TIMEOUT_MS, chromium, site  # noqa: F401 - fixtures
from tests.harness.layout import layout_problems

COMPLAINTS = "/admin/hoa/complaint/"
RUNS = "/admin/charges/monthlychargerun/"
CHARGES = "/admin/charges/monthlycharge/"
UNITS = "/admin/hoa/unit/"
DECEMBER = date(2026, 12, 1)


def sla_cells(html: str) -> dict[str, str]:
    """Each row's "#id title" → the inner HTML of its SLA cell."""
    rows = re.findall(r"<tr>(.*?)</tr>", html, flags=re.S)
    cells = {}
    for row in rows:
        title = re.search(r'<th class="field-__str__"><a [^>]*>([^<]*)</a>', row)
        sla = re.search(r'<td class="field-sla">(.*?)</td>', row, flags=re.S)
        if title and sla:
            cells[title[1]] = sla[1]
    return cells


@pytest.fixture
def complaints(maple):
    now = timezone.now()
    make = Complaint.objects.create
    return {
        "late": make(organization=maple, title="Late", sla_due_at=now - timedelta(hours=6)),
        "recorded": make(
            organization=maple,
            title="Breach recorded, SLA moved",
            sla_due_at=now + timedelta(hours=3),
            sla_breached_at=now - timedelta(hours=1),
        ),
        "on_time": make(organization=maple, title="On time", sla_due_at=now + timedelta(hours=5)),
        "resolved": make(
            organization=maple,
            title="Resolved late",
            status="resolved",
            sla_due_at=now - timedelta(days=2),
        ),
    }


@pytest.mark.django_db
def test_the_sla_column_warns_only_past_the_sla_and_says_so_in_words(client, alice, complaints):
    client.force_login(alice)
    page = client.get(COMPLAINTS).content.decode()
    cells = sla_cells(page)

    def row(key):
        return cells[str(complaints[key])]

    alert = re.compile(
        r'<span class="sla-past"><img src="[^"]*/admin/img/icon-alert.svg" alt="Past SLA:"'
    )
    assert alert.match(row("late")) and row("late").endswith("overdue by 6\xa0hours</span>")
    assert alert.match(row("recorded")) and "breach recorded; due in 2\xa0hours" in row("recorded")
    assert row("on_time").startswith("due in 4\xa0hours") and "<img" not in row("on_time")
    assert row("resolved") == "-"  # no clock running
    # No boolean icon anywhere in the list: a green tick can no longer mean "late".
    assert "icon-yes" not in page and "icon-no" not in page
    # Seven columns, each a short heading.
    headings = re.findall(r'<th scope="col" class="[^"]*column-([\w_]+)', page)
    assert headings == [
        "__str__",
        "organization",
        "unit_label",
        "status",
        "priority",
        "sla",
        "current_vendor",
    ]  # the last one is vendors' (an admin extension)


@pytest.mark.django_db
def test_the_sla_filter_names_its_choices_and_keeps_its_semantics(client, alice, complaints):
    client.force_login(alice)
    page = client.get(COMPLAINTS).content.decode()
    assert "By SLA" in page and "Past SLA" in page and "Not past SLA" in page
    past = client.get(COMPLAINTS, {"breached": "yes"}).context["cl"].result_list
    assert {c.pk for c in past} == {complaints["late"].pk, complaints["recorded"].pk}


@pytest.fixture
def december(maple, alice):
    run = MonthlyChargeRun.objects.create(
        organization=maple,
        month=DECEMBER,
        status="completed",
        completed_at=timezone.now(),
        total=Decimal("8945.50"),
        charge_count=1,
        completed_by="alice",
    )
    MonthlyChargeRun.objects.create(organization=maple, month=date(2026, 11, 1))
    unit = Unit.objects.get(organization=maple, label="M001")
    MonthlyCharge.objects.create(run=run, unit=unit, amount=Decimal("1201.00"))
    return run


@pytest.mark.django_db
def test_runs_read_their_months_and_totals_as_people_do(client, alice, december):
    client.force_login(alice)
    page = client.get(RUNS).content.decode()
    assert '<td class="field-month_name">December 2026</td>' in page
    assert '<td class="field-total_amount">$8,945.50</td>' in page
    assert "Dec. 1, 2026" not in page
    # No month as YYYY-MM outside the links (a moment, 2026-12-05 05:45 UTC, holds its day).
    assert not re.search(r"2026-12(?!-\d\d)", re.sub(r'href="[^"]*"', "", page))
    # The month filter: its choices named for people, YYYY-MM in its links.
    assert re.search(r'<a href="\?month=2026-12"[^>]*>December 2026</a>', page)
    assert re.search(r'<a href="\?month=2026-11"[^>]*>November 2026</a>', page)
    only = client.get(RUNS, {"month": "2026-12"}).context["cl"].result_list
    assert [run.pk for run in only] == [december.pk]
    # A month that is not one: Django's answer to a bad filter, the list and "?e=1".
    bad = client.get(RUNS, {"month": "2026-13"})
    assert bad.status_code == 302 and bad["Location"].endswith("?e=1")


@pytest.mark.django_db
def test_a_runs_page_and_its_charges_read_the_month_and_the_currency(client, alice, december):
    client.force_login(alice)
    detail = client.get(f"{RUNS}{december.pk}/change/").content.decode()
    assert "<title>Maple Court · December 2026 | View monthly charge run" in detail
    assert re.search(r'<div class="readonly">December 2026</div>', detail)
    assert re.search(r'<div class="readonly">\$8,945.50</div>', detail)

    charges = client.get(CHARGES).content.decode()
    assert "Maple Court · December 2026" in charges
    assert '<td class="field-amount_with_currency">$1,201.00</td>' in charges
    units = client.get(UNITS).content.decode()
    assert '<td class="field-assessment">$201.00</td>' in units


@pytest.mark.django_db
def test_amounts_follow_the_currency_setting(client, alice, december, settings):
    settings.CURRENCY = "EUR"
    client.force_login(alice)
    assert '<td class="field-total_amount">€8,945.50</td>' in client.get(RUNS).content.decode()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("username", ["alice", "root"])
def test_the_complaint_changelist_is_readable_at_1280_px(
    chromium,  # noqa: F811
    site,  # noqa: F811
    alice,
    root,
    maple,
    oak,
    username,
):
    now = timezone.now()
    units = list(Unit.objects.filter(organization=maple).order_by("label"))
    for n, title in enumerate(
        [
            "Overflowing gutter above the north stairwell",
            "Water stain spreading on the lobby ceiling",
            "Broken intercom buzzer at the side entrance",
        ]
    ):
        Complaint.objects.create(
            organization=maple,
            unit=units[n],
            title=title,
            status=["open", "in_progress", "assigned"][n],
            priority=["high", "normal", "low"][n],
            sla_due_at=now + timedelta(hours=[-6, 5, 30][n]),
        )
    Complaint.objects.create(organization=oak, title="Streetlight flickering in visitor parking")
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    try:
        page = context.new_page()
        page.goto(f"{site}/admin/login/?next={COMPLAINTS}")
        page.fill("#id_username", username)
        page.fill("#id_password", f"pw-{username}")
        page.click("input[type=submit]")
        page.wait_for_selector("#result_list")
        problems = layout_problems(page)
        assert problems == [], "\n".join(problems)
        # Every column of the table in view beside the filters: nothing to scroll to.
        fit = page.evaluate(
            """() => {
              const box = document.querySelector('#changelist-form .results');
              return {table: document.querySelector('#result_list').scrollWidth,
                      box: box.clientWidth};
            }"""
        )
        assert fit["table"] <= fit["box"] + 0.5
        # The status column reads "In progress" on one line (it was "Ope/n").
        lines = page.locator("td.field-status").evaluate_all(
            """cells => cells.map(td => {
              const range = document.createRange();
              range.selectNodeContents(td);
              return [td.textContent, range.getClientRects().length];
            })"""
        )
        assert sorted(lines) == [["Assigned", 1], ["In progress", 1], ["Open", 1]] + (
            [["Open", 1]] if username == "root" else []
        )
    finally:
        context.close()
