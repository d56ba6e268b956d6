"""The benchmark harness measures what it says: one tiny lock-cycle group end to end.

Speed is never asserted here (it belongs to ``make bench``); what is asserted is that the
harness runs a case in a fresh process, counts the Redis commands and PostgreSQL round
trips it claims to count, evaluates a target and writes its JSON.
"""

import json
import os

import pytest
from django.db import connection, transaction

from bench.environment import BenchRedis
from bench.measure import PgRoundTrips, percentile
from bench.plan import Target
from bench.report import evaluate, write_json
from bench.runner import Case, Group, run_group


@pytest.fixture
def private_redis():
    server = BenchRedis().start()
    yield server
    server.stop()


def _cycle(variant: str, url: str) -> Case:
    return Case(
        id=f"lock.{variant}",
        label=variant,
        entry="bench.cases.lock_cycle:run",
        django=False,
        params={"variant": variant, "redis_url": url, "iterations": 40, "warmup": 5, "counted": 4},
    )


def test_lock_cycle_group_counts_commands_and_writes_json(private_redis, tmp_path):
    group = Group(
        id="lock-cycle",
        title="smoke",
        cases=[_cycle("ping", private_redis.url), _cycle("ours", private_redis.url)],
        repeats=1,
        baseline="lock.ping",
    )

    summary = run_group(group, dict(os.environ), log=lambda message: None)
    ping, ours = summary["rows"]
    targets = evaluate(
        [
            Target(
                "1",
                "two commands",
                "lock-cycle",
                "lock.ours",
                "==",
                2,
                value="counts.redis_sent_total",
            ),
            Target(
                "1",
                "three commands",
                "lock-cycle",
                "lock.ours",
                "==",
                3,
                value="counts.redis_sent_total",
            ),
        ],
        [summary],
    )
    path = tmp_path / "results" / "smoke.json"
    write_json(path, {"groups": [summary], "targets": targets})

    assert (ping["error"], ours["error"]) == (None, None)
    assert (ping["samples"], ours["samples"]) == (40, 40)
    # MONITOR sees what the client sent; commandstats also sees the script's own calls.
    assert ping["counts"]["redis_sent"] == {"ping": 1.0}
    assert ours["counts"]["redis_sent"] == {"evalsha": 2.0}
    assert ours["counts"]["redis_executed"] == {
        "del": 1.0,
        "evalsha": 2.0,
        "get": 2.0,  # the grant reads the counter (is it there?), the release the lease
        "incr": 1.0,
        "set": 1.0,
        "time": 1.0,
    }
    assert ours["invariants"][0]["ok"] is True
    assert ours["ratio"] is not None and ours["ratio"] > 0
    assert [t["status"] for t in targets] == ["PASS", "MISS"]
    written = json.loads(path.read_text())
    assert written["groups"][0]["rows"][1]["case"] == "lock.ours"
    assert not list(path.parent.glob("*.tmp"))


def test_a_crashing_case_is_reported_not_raised(private_redis):
    broken = Case(
        id="lock.nope",
        label="nope",
        entry="bench.cases.lock_cycle:run",
        django=False,
        params={"variant": "nope", "redis_url": private_redis.url, "iterations": 1, "warmup": 0},
    )
    group = Group(id="g", title="g", cases=[broken], repeats=2)

    summary = run_group(group, dict(os.environ), log=lambda message: None)

    assert "KeyError: 'nope'" in summary["rows"][0]["error"]
    assert summary["rows"][0]["runs"] == 0


@pytest.mark.django_db(transaction=True)
def test_round_trips_are_counted_from_the_wire_begin_and_commit_included():
    with PgRoundTrips(connection) as idle:
        pass
    with PgRoundTrips(connection) as trips, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.execute('SELECT %s::int AS "quoted"', [2])

    assert (idle.round_trips, dict(idle.statements)) == (0, {})
    assert trips.round_trips == 4
    assert dict(trips.statements) == {"BEGIN": 1, "SELECT": 2, "COMMIT": 1}


def test_percentile_is_nearest_rank():
    samples = list(range(1, 101))
    assert (percentile(samples, 50), percentile(samples, 99), percentile(samples, 100)) == (
        50,
        99,
        100,
    )
