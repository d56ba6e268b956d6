"""``make bench-scale``'s judgement and diagnosis: the goals it prints, the statements it
calls grown, the plans it explains, the estimate it gives, and the cleanup it refuses.

Speed is never asserted here; the figures are made up and the database is the test one.
"""

import os
import subprocess
import sys

import pytest
from django.db import connection

from bench import diagnose, scale, scale_report
from bench.cases.fenced_writes import _delete_associations
from bench.measure import PeakMemory
from bench.plan import SCALE_GOALS
from hoa.models import Organization


def _row(associations, *, ratio, ours_ms, rss, error=None) -> dict:
    return {
        "associations": associations, "ratio": ratio, "ours_ms_per_association": ours_ms,
        "ours_peak_rss_mb": rss, "error": error,
    }  # fmt: skip


def test_the_goals_compare_the_largest_scale_with_the_next_and_the_smallest():
    rows = [
        _row(1_000, ratio=1.25, ours_ms=3.0, rss=80.0),
        _row(10_000, ratio=1.29, ours_ms=2.8, rss=82.0),
        _row(100_000, ratio=1.31, ours_ms=3.2, rss=97.0),
    ]

    judged = {
        t["text"]: (t["measured"], t["status"]) for t in scale_report.targets(rows, SCALE_GOALS)
    }

    assert judged == {
        "ours ≤ 1.3x the plain COPY loop at 1,000": (1.25, "PASS"),
        "ours ≤ 1.3x the plain COPY loop at 10,000": (1.29, "PASS"),
        "ours ≤ 1.3x the plain COPY loop at 100,000": (1.31, "MISS"),
        # 3.2 / 2.8, against 10,000 (the next smaller), not 1,000
        "ours per association at 100,000 ≤ 1.1x that at 10,000": (1.143, "MISS"),
        # 97 / 80, against 1,000 (the smallest)
        "ours' peak RSS at 100,000 ≤ 1.2x that at 1,000": (1.212, "MISS"),
    }


def test_a_crashed_scale_fails_its_goals_instead_of_passing_them():
    rows = [_row(1_000, ratio=1.1, ours_ms=3.0, rss=80.0), _row(10_000, ratio=None,
            ours_ms=None, rss=None, error="timed out after 1200s")]  # fmt: skip

    statuses = [t["status"] for t in scale_report.targets(rows, SCALE_GOALS)]

    assert statuses == ["PASS", "FAIL", "FAIL", "FAIL"]


def test_a_statement_is_grown_when_its_time_per_association_rose_past_the_factor():
    small = diagnose.per_association(
        [[{"query": "COPY a", "calls": 1_000, "total_ms": 3_000.0, "blks_read": 0},
          {"query": "SELECT b", "calls": 200_000, "total_ms": 1_000.0, "blks_read": 0},
          {"query": "SELECT c", "calls": 1_000, "total_ms": 10.0, "blks_read": 0}]],
        1_000,
    )  # fmt: skip
    large = diagnose.per_association(
        [[{"query": "COPY a", "calls": 10_000, "total_ms": 31_000.0, "blks_read": 0},
          {"query": "SELECT b", "calls": 2_000_000, "total_ms": 25_000.0, "blks_read": 9},
          {"query": "SELECT c", "calls": 10_000, "total_ms": 300.0, "blks_read": 0}]],
        10_000,
    )  # fmt: skip

    grown = diagnose.grown(small, large, factor=1.1, share=0.01)

    # COPY: 3.0 -> 3.1 ms, within 1.1x; SELECT c: 0.01 -> 0.03 ms, but under 1% of the time.
    assert [(g["query"], g["ms_before"], g["ms_after"], g["growth"]) for g in grown] == [
        ("SELECT b", 1.0, 2.5, 2.5)
    ]
    assert grown[0]["calls_before"] == grown[0]["calls_after"] == 200


def test_a_statement_django_sent_matches_the_text_pg_stat_statements_keeps():
    sent = (
        'SELECT "hoa_unit"."id" FROM "hoa_unit" WHERE ("hoa_unit"."organization_id" IN '
        '(101, 102, 103) AND "hoa_unit"."label" = \'U\'\'1\' AND "hoa_unit"."x" > 1.5)'
    )
    kept = (
        'SELECT "hoa_unit"."id" FROM "hoa_unit"\n  WHERE ("hoa_unit"."organization_id" IN '
        '($1, $2, $3) AND "hoa_unit"."label" = $4 AND "hoa_unit"."x" > $5)'
    )

    assert diagnose.normalized(sent) == diagnose.normalized(kept)


@pytest.mark.django_db
def test_explaining_a_statement_runs_it_and_takes_its_writes_back(maple):
    before = Organization.objects.count()
    statements = [
        "INSERT INTO hoa_organization (name, slug, sla_hours_high, sla_hours_normal,"
        " sla_hours_low, created_at, time_zone)"
        " VALUES ('Probe', 'probe', 4, 24, 72, now(), 'UTC')",
        # As Django sends them (client-side binding): the values in the text.
        f"SELECT id FROM hoa_organization WHERE id = {maple.pk:d}",  # noqa: S608
        f"SELECT id FROM hoa_organization WHERE id = {maple.pk + 1:d}",  # noqa: S608 - same shape
        "SAVEPOINT s1",  # transaction control: not explained
    ]

    plans = diagnose.explain(statements)

    assert len(plans) == 2
    assert all("actual time=" in plan and "Buffers" in plan for plan in plans.values())
    assert Organization.objects.count() == before
    assert connection.in_atomic_block  # the test's own transaction is still there


@pytest.mark.django_db
def test_the_scale_cleanup_refuses_to_empty_any_database_but_its_own(maple):
    with pytest.raises(SystemExit, match="refusing to empty the tables of"):
        _delete_associations(None, "truncate")

    assert Organization.objects.filter(pk=maple.pk).exists()


def test_the_estimate_adds_each_scale_and_takes_the_largest_for_the_disk():
    model = {"seconds_per_case": 10.0, "seconds_per_association": 0.005,
             "bytes_fixed": 200_000_000, "bytes_per_association": 100_000}  # fmt: skip

    expected = scale.estimate([1_000, 10_000], 3, model)

    # 2 cases x 3 runs: (10 + 5) + (10 + 50) seconds each
    assert expected == {"seconds": 6 * 15 + 6 * 60, "peak_bytes": 200_000_000 + 1_000_000_000}


def test_the_fitted_cost_model_goes_through_the_measured_scales():
    groups = [
        {"associations": 1_000, "seconds": 4 * 20.0, "rows": [{}, {}], "repeats": 2,
         "peak_disk_bytes": 400_000_000},
        {"associations": 10_000, "seconds": 4 * 65.0, "rows": [{}, {}], "repeats": 2,
         "peak_disk_bytes": 1_300_000_000},
    ]  # fmt: skip

    model = scale.fit(groups)

    assert model == {
        "seconds_per_case": 15.0, "seconds_per_association": 0.005,
        "bytes_fixed": 300_000_000, "bytes_per_association": 100_000,
    }  # fmt: skip


_GRANDCHILD = """
import subprocess, sys, time
held = b"\\x01" * (80 << 20)  # touched, so resident
child = "import time; held = b'\\\\x01' * (120 << 20); time.sleep(1.0)"
subprocess.run([sys.executable, "-c", child], check=True)
"""


def test_peak_memory_is_each_walk_process_own_not_the_memory_it_was_started_from():
    """A command started from the case's process: its peak is its own (and its workers'),
    not the case's fixtures. ``ru_maxrss`` of children once gave the case's own peak,
    +30 MB at 100,000 associations (an RSS goal missed by the harness, not the walk)."""
    ballast = b"\x01" * (300 << 20)  # the case's own peak: far above the command's
    del ballast

    with PeakMemory(os.getpid()) as peak:
        subprocess.run([sys.executable, "-c", _GRANDCHILD], check=True)

    # The grandchild's 120 MB, found under the child; not this process's 300 MB.
    assert 120 < peak.mb < 300
