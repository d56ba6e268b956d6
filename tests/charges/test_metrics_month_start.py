"""The month start on /metrics (issue 28): associations by the state of their own current
month's run, counted from the database at each scrape, and the configured deadline day."""

import sys
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from django.db import transaction
from django.utils import timezone

from charges.models import MonthlyChargeRun
from hoa.models import Organization
from locking import unfenced_writes
from tests.harness.processes import run_child
from tests.races.test_topologies_metrics import scrape, value

pytestmark = pytest.mark.django_db

STATES = ("completed", "pending", "not_started")


def month_in(zone: str):
    return timezone.now().astimezone(ZoneInfo(zone)).date().replace(day=1)


def organization(slug: str, zone: str = "UTC") -> Organization:
    return Organization.objects.create(name=slug.title(), slug=slug, time_zone=zone)


def run(org: Organization, month, *, completed: bool) -> MonthlyChargeRun:
    return MonthlyChargeRun.objects.create(
        organization=org,
        month=month,
        status="completed" if completed else "pending",
        completed_at=timezone.now() if completed else None,
    )


def states(client) -> dict[str, float]:
    status, samples, _body = scrape(client)
    assert status == 200
    return {s: value(samples, "charges_month_start_organizations", state=s) for s in STATES}


def test_associations_are_counted_by_the_state_of_their_current_months_run(client):
    done, running, idle = organization("done"), organization("running"), organization("idle")
    month = month_in("UTC")
    run(done, month, completed=True)
    run(running, month, completed=False)
    last_month = datetime(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1).date()
    run(idle, last_month, completed=True)  # last month's run does not count for this one

    assert states(client) == {"completed": 1.0, "pending": 1.0, "not_started": 1.0}


def test_each_association_is_counted_in_its_own_time_zones_month(client):
    # UTC+14 and UTC-11: on the first and the last day of a month they are in different
    # months for hours; each is billed for (and counted in) its own.
    east, west = "Pacific/Kiritimati", "Pacific/Pago_Pago"
    run(organization("east", east), month_in(east), completed=True)
    run(organization("west", west), month_in(west), completed=True)
    assert states(client) == {"completed": 2.0, "pending": 0.0, "not_started": 0.0}


def test_the_counts_follow_the_database_from_one_scrape_to_the_next(client):
    org = organization("maple")
    assert states(client)["not_started"] == 1.0
    pending = run(org, month_in("UTC"), completed=False)
    assert states(client) == {"completed": 0.0, "pending": 1.0, "not_started": 0.0}
    # The run's completion, written here without its service: the table is strict
    # (written only under a fence), so the test says it writes unfenced on purpose.
    with transaction.atomic(), unfenced_writes():
        MonthlyChargeRun.objects.filter(pk=pending.pk).update(
            status="completed", completed_at=timezone.now()
        )
    assert states(client) == {"completed": 1.0, "pending": 0.0, "not_started": 0.0}


def test_the_deadline_day_is_the_configured_setting(client, settings):
    settings.CHARGES_MONTH_START_DEADLINE_DAY = 3
    _status, samples, _body = scrape(client)
    assert value(samples, "charges_month_start_deadline_day") == 3.0


def test_the_month_start_counts_take_two_queries_whatever_the_number_of_associations(
    client, django_assert_num_queries
):
    for number in range(20):
        org = organization(f"org-{number}", "Europe/Paris" if number % 2 else "America/Chicago")
        run(org, month_in(org.time_zone), completed=bool(number % 3))
    # Two for the month start's counts; one more each for the reporters' outbox and the
    # outside calls of unknown outcome (hoa.jobs).
    with django_assert_num_queries(4):
        _status, samples, _body = scrape(client)
    assert sum(value(samples, "charges_month_start_organizations", state=s) for s in STATES) == 20


def deadline_day_in_a_child(raw: str):
    env = {
        "PATH": "/usr/bin:/bin",
        "SECRET_KEY": "a-production-grade-secret-" + "k3y!" * 16,
        "DEBUG": "0",
        "CHARGES_MONTH_START_DEADLINE_DAY": raw,
    }
    code = "import hoa.settings as s; print(s.CHARGES_MONTH_START_DEADLINE_DAY)"
    return run_child([sys.executable, "-c", code], env=env)


def test_the_deadline_day_comes_from_the_environment():
    child = deadline_day_in_a_child("5")
    assert (child.returncode, child.stdout) == (0, "5\n"), child.stderr


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("29", "CHARGES_MONTH_START_DEADLINE_DAY must be a day from 1 to 28, got 29"),
        ("0", "CHARGES_MONTH_START_DEADLINE_DAY must be at least 1, got '0'"),
        ("first", "CHARGES_MONTH_START_DEADLINE_DAY must be a number, got 'first'"),
    ],
)
def test_a_deadline_day_outside_the_month_stops_the_start_with_one_line(raw, said):
    child = deadline_day_in_a_child(raw)
    assert child.returncode == 1
    assert child.stderr.strip().splitlines()[-1] == (
        f"django.core.exceptions.ImproperlyConfigured: {said}"
    )
