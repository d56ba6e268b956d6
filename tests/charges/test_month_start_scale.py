"""The month start at scale (issue 27): what made its cost per association grow with the
batch, and the round trips it saves per chunk of associations."""

import itertools
from datetime import date
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from charges import month_start
from charges.models import MonthlyCharge, MonthlyChargeRun
from hoa.models import Organization, Unit
from locking.models import FenceEvent
from tests.charges_support import MONTH, MONTH_ARG

pytestmark = pytest.mark.django_db(transaction=True)

RUNS_TABLE = MonthlyChargeRun._meta.db_table


def runs_table_seq_scans() -> int:
    """Sequential scans of the runs table in this session's current transaction (the
    foreign-key checks' own included): ``pg_stat_xact_user_tables`` is this backend's,
    not yet flushed, so it is exact and immediate."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = %s", [RUNS_TABLE]
        )
        return cursor.fetchone()[0]


def charge_each_unit(run: MonthlyChargeRun, units: list[Unit]) -> int:
    """Insert one charge per unit of ``run`` in one transaction; return how many sequential
    scans of the runs table their foreign-key checks made."""
    with transaction.atomic():
        before = runs_table_seq_scans()
        for unit in units:  # one INSERT each: one foreign-key check each
            MonthlyCharge.objects.create(run=run, unit=unit, amount=unit.monthly_assessment)
        return runs_table_seq_scans() - before


@pytest.fixture
def runs_table_without_autovacuum():
    # An autovacuum's ANALYZE would re-plan the check in the middle of the test.
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {RUNS_TABLE} SET (autovacuum_enabled = false)")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {RUNS_TABLE} RESET (autovacuum_enabled)")


def test_replanning_turns_the_charges_foreign_key_check_from_a_scan_into_an_index_lookup(
    maple, runs_table_without_autovacuum
):
    units = list(maple.units.order_by("label"))
    # A runs table vacuumed empty (a first month start, or the bench after its cleanup)...
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {RUNS_TABLE}")
    first = MonthlyChargeRun.objects.create(organization=maple, month=MONTH)
    # ...where the check's plan is made, then cached for the session: a sequential scan.
    assert charge_each_unit(first, units) == len(units)
    # The walk adds thousands of runs; this session still scans them all per charge.
    elm = Organization.objects.create(name="Elm", slug="elm")
    MonthlyChargeRun.objects.bulk_create(
        MonthlyChargeRun(organization=elm, month=date(1800 + n // 12, 1 + n % 12, 1))
        for n in range(2400)
    )
    second = MonthlyChargeRun.objects.create(organization=maple, month=MONTH.replace(month=4))
    assert charge_each_unit(second, units) == len(units)

    MonthlyChargeRun.objects.replan_charge_checks()

    third = MonthlyChargeRun.objects.create(organization=maple, month=MONTH.replace(month=5))
    assert charge_each_unit(third, units) == 0


def add_organizations(count: int) -> None:
    for number in range(count):
        org = Organization.objects.create(name=f"Cedar {number}", slug=f"cedar-{number}")
        Unit.objects.bulk_create(
            Unit(organization=org, label=f"C{unit}", monthly_assessment=100 + unit)
            for unit in range(1, number + 3)
        )


def walk_statements(monkeypatch, **constants) -> list[str]:
    """The statements of a month start over seven associations (maple, oak and five more)
    with ``charges.month_start``'s ``constants`` set for the walk."""
    add_organizations(5)
    for name, value in constants.items():
        monkeypatch.setattr(month_start, name, value)
    with CaptureQueriesContext(connection) as queries:
        call_command(
            "generate_monthly_charges", "--all-orgs", "--month", MONTH_ARG, stdout=StringIO()
        )
    return [query["sql"].strip() for query in queries.captured_queries]


def test_all_orgs_commits_together_attempts_at_a_time_each_under_its_own_lease(
    maple, oak, billing, monkeypatch
):
    statements = walk_statements(monkeypatch, TOGETHER=3)  # one chunk, 3 together

    commits = [n for n, sql in enumerate(statements) if sql == "COMMIT"]
    run_row = 'inserted AS (INSERT INTO "charges_monthlychargerun"'
    runs = [n for n, sql in enumerate(statements) if run_row in sql]
    claims = [
        n
        for n, sql in enumerate(statements)
        if sql.startswith("WITH claim AS") and run_row not in sql
    ]
    # Per three associations, one transaction of claims (committed before their billing
    # calls) and one of their runs (the chunk's first epochs are one statement in
    # autocommit): six commits, not fourteen.
    assert len(commits) == 6
    windows = list(itertools.pairwise([-1, *commits]))
    assert [sum(start < claim < end for claim in claims) for start, end in windows] == [
        3, 0, 3, 0, 1, 0
    ]  # fmt: skip
    assert [sum(start < run < end for run in runs) for start, end in windows] == [
        0, 3, 0, 3, 0, 1
    ]  # fmt: skip
    # Each under its own lease: a token and an audit row per association, all committed.
    events = FenceEvent.objects.filter(resource__endswith=MONTH_ARG).values_list("outcome", "token")
    assert sorted(events) == [("committed", 1)] * 7
    assert len(billing.received) == 7
    assert MonthlyChargeRun.objects.completed().filter(month=MONTH).count() == 7
    assert MonthlyCharge.objects.count() == Unit.objects.count()


def test_all_orgs_reads_each_chunks_units_once_and_replans_per_chunk(
    maple, oak, billing, monkeypatch
):
    statements = walk_statements(monkeypatch, CHUNK=3)  # chunks of 3: 3 chunks

    def count(prefix: str) -> int:
        return sum(sql.startswith(prefix) for sql in statements)

    assert count("DISCARD PLANS") == 3
    assert count('SELECT "hoa_unit"') == 3  # the chunk's units, not each one's
    # Per association: its claim, its run, read under the claim (another host may have
    # completed it: then it is not billed again), its run row inserted completed with the
    # token on it and its audit row with it (insert_fenced: no fence UPDATE, no totals
    # UPDATE, no audit INSERT of its own), the charges.
    assert count("WITH claim AS") == 14  # the claim alone, and insert_fenced's
    assert count('SELECT "charges_monthlychargerun"') == 7
    inserts = [s for s in statements if 'inserted AS (INSERT INTO "charges_monthlychargerun"' in s]
    assert len(inserts) == 7
    assert all('audited AS (INSERT INTO "locking_fenceevent"' in s for s in inserts)
    assert count('UPDATE "charges_monthlychargerun"') == 0
    assert count('INSERT INTO "locking_fenceevent"') == 0
    # And the result is the same: every association once, one charge per unit.
    assert MonthlyChargeRun.objects.completed().filter(month=MONTH).count() == 7
    assert MonthlyCharge.objects.count() == Unit.objects.count()
    assert len(billing.received) == 7
    by_org = {r.json["organization"]["slug"]: r.json["charge_count"] for r in billing.received}
    assert by_org == {org.slug: org.units.count() for org in Organization.objects.all()}
