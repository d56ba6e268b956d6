"""Server-side SVG charts: the bar chart and the lock timeline (hoa.charts), and the pages
that draw them."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from charges.models import MonthlyChargeRun
from hoa.charts import Bar, LeaseSpan, Mark, bar_chart, lock_timeline

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LANES = [("committed", "Committed"), ("busy", "Busy"), ("stale", "Stale")]


def bar_heights(svg: str) -> list[float]:
    return [float(h) for h in re.findall(r'<rect class="bar[^"]*"[^>]* height="([\d.]+)"', svg)]


def test_bar_chart_draws_one_bar_per_value_scaled_to_the_largest():
    bars = [Bar(label=f"M{n}", value=Decimal(n * 100)) for n in range(1, 13)]
    svg = str(bar_chart(bars, title="Totals", height=200))
    heights = bar_heights(svg)
    assert svg.startswith('<svg class="chart bars wide"')
    # The same bars lying down follow, for a phone: one <rect class="hbar"> each.
    assert len(re.findall(r'<rect class="hbar', svg)) == 12
    assert len(heights) == 12
    assert heights[-1] == 200 - 22 - 24  # the largest fills the plot
    assert heights[5] == pytest.approx(heights[-1] * 6 / 12, abs=0.1)
    assert "<title>M3: 300</title>" in svg


def test_bar_chart_escapes_labels_and_draws_zero_bars_flat():
    svg = str(bar_chart([Bar("<b>x</b>", 0), Bar("y", 5)], title="<t>"))
    assert "<b>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg
    assert 'aria-label="&lt;t&gt;"' in svg
    assert bar_heights(svg) == [0.0, 200 - 22 - 24]


def test_bar_chart_without_values_says_so():
    assert "Nothing to chart yet." in str(bar_chart([], title="Totals"))


def test_lock_timeline_places_marks_in_time_order_on_their_outcomes_lanes():
    marks = [
        Mark(at=T0, outcome="committed", token=1, title="first"),
        Mark(at=T0 + timedelta(seconds=30), outcome="busy", token=1, title="refused"),
        Mark(at=T0 + timedelta(seconds=60), outcome="stale", token=2, title="late"),
    ]
    svg = str(lock_timeline(marks, lanes=LANES, title="r"))
    xs = [float(x) for x in re.findall(r'<circle cx="([\d.]+)"', svg)]
    ys = [float(y) for y in re.findall(r'<circle cx="[\d.]+" cy="([\d.]+)"', svg)]
    assert xs == sorted(xs) and xs[0] < xs[1] < xs[2]
    assert len(set(ys)) == 3  # three lanes
    assert re.findall(r'class="token"[^>]*>(#\d+)<', svg) == ["#1", "#1", "#2"]
    assert "12:00:00" in svg and "12:01:00" in svg


def test_lock_timeline_draws_only_lanes_in_use_plus_the_held_lease():
    lease = LeaseSpan(start=T0, end=T0 + timedelta(seconds=30), token=4, title="held")
    svg = str(
        lock_timeline(
            [Mark(at=T0, outcome="busy", token=3, title="x")], lanes=LANES, lease=lease, title="r"
        )
    )
    assert re.findall(r'class="lane-label"[^>]*>([^<]+)<', svg) == ["Held now", "Busy"]
    assert '<g class="lease"><title>held</title>' in svg


def test_lock_timeline_without_history_says_so():
    assert "No attempts recorded" in str(lock_timeline([], lanes=LANES, title="r"))


@pytest.mark.django_db
def test_charges_page_charts_the_last_twelve_months(client, alice, maple):
    this_month = timezone.localdate().replace(day=1)
    last_month = (this_month - timedelta(days=1)).replace(day=1)
    MonthlyChargeRun.objects.create(
        organization=maple,
        month=last_month,
        status=MonthlyChargeRun.Status.COMPLETED,
        completed_at=timezone.now(),
        total=Decimal("2055.00"),
        charge_count=10,
    )
    client.force_login(alice)
    html = client.get(f"/orgs/{maple.slug}/charges/").content.decode()
    svg = html.split("<svg")[1].split("</svg>")[0]
    assert len(re.findall(r'<rect class="bar', svg)) == 12
    assert f"{last_month:%B %Y}: $2,055.00" in svg  # its month and total, in the currency
    assert ">$2,055</text>" in svg


@pytest.mark.django_db
def test_charges_page_says_why_its_chart_is_empty_before_the_first_run(client, alice, maple):
    client.force_login(alice)
    html = client.get(f"/orgs/{maple.slug}/charges/").content.decode()
    assert "<svg" not in html.split("Totals of the last 12 months")[1].split("</section>")[0]
    assert "Each month&#x27;s total appears here once its charges are generated" in html
