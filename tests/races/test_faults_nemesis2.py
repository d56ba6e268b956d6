"""The nemesis, second generation (scenario 10, issue 26): a short round, and its checkers.

The first test plays one seed of ``tests/faults/scenarios/nemesis2.py`` against real
processes it starts itself: a private Redis primary and replica behind a proxy
(``LOCK_REDIS_MIN_REPLICAS=1``), a proxy to this test database, five fenced-write client
processes, two gunicorn instances with production settings and eight staff clients (charges,
assignments, payments and voids of invoices). It
fails Redis over (once while replication lags), partitions Redis and PostgreSQL, and
freezes and wipes, one round of each; then every checker must find nothing. PostgreSQL
restarts need the suite's own cluster and run in ``make faults`` only; so does the control
run with ``LOCK_REDIS_MIN_REPLICAS=0`` (``10-control``), which must find violations.

The other tests feed the new rules hand-made histories they must reject.
"""

import json
from collections import Counter

import pytest
from django.conf import settings

from tests.faults.clients import Op
from tests.faults.fence_history import (
    FENCED_MUTEX,
    ClientOp,
    Write,
    check_fence_history,
    fenced_mutex_from_lines,
    history_lines,
    stale_grants_from_lines,
)
from tests.faults.scenario import find, run_scenario
from tests.faults.scenarios.nemesis2 import Nemesis2Plan, check_http_answers, play
from tests.faults.seed import seed_world
from tests.faults.stack import Stack, StackOptions
from tests.harness.processes import django_database_url
from vendors.models import VendorPayment

SCHEDULE = ("failover", "redis-partition", "pg-partition", "pause-wipe", "failover")


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker):
    """The stand-in and its proxy for this test database; the scenario starts the rest."""
    system = Stack(StackOptions(secret_key=settings.SECRET_KEY, database_url=django_database_url()))
    try:
        yield system.start_services()
    finally:
        system.stop()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_round_of_every_fault_kind_under_staff_load_finds_no_violation(stack):
    world = seed_world(users=10)
    seed = Nemesis2Plan.from_env().seeds[0]
    plan = Nemesis2Plan(seeds=(seed,), schedule=SCHEDULE, lag_probability=0.5)
    spec, _ = find("10-nemesis2")
    result = run_scenario(stack, world, spec, lambda s: play(s, plan))
    counts = result.facts["counts"]
    context = "\n".join([result.observed, *result.violations, *result.surprises])
    if result.violations or result.surprises:
        context += "\n" + "\n".join(stack.server_errors())
    assert result.violations == [], context
    assert result.surprises == [], context
    assert counts["rounds by kind"] == {
        "failover": 2,
        "pause-wipe": 1,
        "pg-partition": 1,
        "redis-partition": 1,
    }, context
    assert counts["failovers"] == counts["replicas brought up"] == 2, context
    assert counts["redis partitions"] == counts["pg partitions"] == 1, context
    assert counts["writes"] >= 5, context
    assert counts["http requests"] >= 8, context
    assert counts["violations"] == 0, context
    # Payments ran under the faults too, and money left for some of the invoices, once each
    # (the checker's rules for payments found nothing above).
    pays = [op for op in result.ops if op.kind == "pay"]
    answers = Counter((op.verdict, op.status, op.detail[:60]) for op in pays)
    assert any(op.verdict in ("done", "already_done") for op in pays), f"{context}\n{answers}"
    assert VendorPayment.objects.filter(invoice__number__startswith="F-").exists(), context


# -- the new rules catch what they must ------------------------------------------------------


def _told(client, op, outcome, token, t_request, t_ack) -> ClientOp:
    return ClientOp(client, op, outcome, t_request, t_ack, token, t_request + 0.01)


def test_fenced_mutex_names_a_token_not_above_one_acknowledged_before_the_request():
    attempts = [
        _told(0, 1, "committed", 7, 0.0, 1.0),
        # Asked after token 7 was acknowledged, and was acknowledged a lower one.
        _told(1, 1, "committed", 6, 2.0, 2.5),
        # Overlapping token 7's request: either order is fine.
        _told(2, 1, "committed", 5, 0.5, 1.5),
        # Refused: it promised nothing.
        _told(3, 1, "stale", 4, 3.0, 3.1),
    ]
    report = check_fence_history([], attempts)
    mutex = [str(v) for v in report.violations if v.rule == FENCED_MUTEX]
    assert mutex == [
        f"[{FENCED_MUTEX}] client 1 op 1 was acknowledged token 6, not above token 7 that "
        "client 0 op 1 was acknowledged before it asked"
    ]


def test_the_history_is_jepsen_shaped_json_lines():
    attempts = [_told(0, 1, "committed", 7, 10.0, 10.5), _told(1, 1, "error", None, 10.2, 11.0)]
    lines = history_lines(attempts, resource="nemesis:complaint:1", start=10.0)
    assert [json.loads(json.dumps(line)) for line in lines] == [
        {
            "index": 0,
            "process": "client-0",
            "type": "invoke",
            "operation": "fenced-write",
            "value": {"resource": "nemesis:complaint:1", "op": 1},
            "time": 0,
        },
        {
            "index": 1,
            "process": "client-1",
            "type": "invoke",
            "operation": "fenced-write",
            "value": {"resource": "nemesis:complaint:1", "op": 1},
            "time": 200_000_000,
        },
        {
            "index": 2,
            "process": "client-0",
            "type": "ok",
            "operation": "fenced-write",
            "value": {
                "resource": "nemesis:complaint:1",
                "op": 1,
                "token": 7,
                "outcome": "committed",
            },
            "time": 500_000_000,
        },
        {
            "index": 3,
            "process": "client-1",
            "type": "info",
            "operation": "fenced-write",
            "value": {
                "resource": "nemesis:complaint:1",
                "op": 1,
                "token": None,
                "outcome": "error",
            },
            "time": 1_000_000_000,
        },
    ]


def _http(verdict, status, started, ended) -> Op:
    return Op(
        kind="assign",
        org="o",
        org_id=1,
        client="http-0",
        complaint=1,
        vendor=1,
        started=started,
        ended=ended,
        verdict=verdict,
        status=status,
    )


def test_http_answers_allow_a_503_only_while_a_fault_is_on_and_a_502_only_in_a_pg_restart():
    windows = [("redis-partition", 100.0, 102.0)]
    ops = [
        _http("unavailable", 503, 101.0, 101.5),  # during the partition: fine
        _http("indeterminate", 503, 104.0, 104.2),  # within the slack after it: fine
        _http("unavailable", 503, 120.0, 120.1),  # long after: a violation
        _http("error", 500, 101.0, 101.1),  # a 500 is never fine
        _http("no_answer", None, 101.0, 131.0),  # nor a broken connection
        _http("done", 303, 120.0, 120.1),
        _http("failed", 502, 101.0, 101.2),  # a 502 while only Redis is cut: a violation
        _http("failed", 502, 200.5, 200.7),  # the stand-in's database restarting: fine
    ]
    windows.append(("pg-restart", 200.0, 201.0))
    problems = check_http_answers(ops, windows)
    assert len(problems) == 4, problems
    assert "503 unavailable while no fault was on" in problems[0]
    assert "500 error (faults on: redis-partition)" in problems[1]
    assert "no answer no_answer" in problems[2]
    assert "502 failed (faults on: redis-partition)" in problems[3]


def test_an_outside_checker_finds_both_rules_from_the_json_history_alone():
    # Client 1 was granted token 12 at t=1.0 and frozen; client 2 asked at 3.0, was handed
    # 11 (a counter behind after a failover) and wrote it; client 1 then wrote 12 after it.
    writes = [Write(1, 2, 4, 11, 3.0, 3.2), Write(2, 1, 7, 12, 0.9, 1.0)]
    attempts = [
        ClientOp(2, 4, "committed", 3.0, 3.3, 11, 3.2),
        ClientOp(1, 7, "committed", 0.9, 3.5, 12, 1.0),
        ClientOp(0, 1, "committed", 4.0, 4.2, 10, 4.1),  # asked after 11 and 12 were told
    ]
    lines = history_lines(attempts, resource="r", start=0.0, writes=writes)
    lines = [json.loads(json.dumps(line)) for line in lines]  # through the file format
    assert stale_grants_from_lines(lines) == [
        "r: [stale-grant-won] write #2 (client 1 op 7, token 12) committed after write #1 "
        "(client 2 op 4, token 11), but its grant arrived 2.000s before that write's "
        "request: an older grant overwrote newer work"
    ]
    assert fenced_mutex_from_lines(lines) == [
        f"r: [{FENCED_MUTEX}] client 0 op 1 was acknowledged token 10, not above token 12 "
        "that client 1 op 7 was acknowledged before it asked"
    ]
