"""The randomized nemesis of the fault suite (scenario 9, issue 15), short, and its checker.

The first test runs a few rounds of ``tests/faults/scenarios/nemesis.py`` against real
processes: five client processes writing one fenced row through ``locking`` on this test
database, and a private redis-server that the nemesis empties (FLUSHALL, or SIGKILL and an
empty restart) while it keeps older grants frozen with SIGSTOP. Then the history checker
must find nothing. Set ``FAULTS_SEED`` to replay a schedule; the seed is in the failure.

The other tests feed the checker (``tests/faults/fence_history.py``) hand-made histories
that contradict each of its rules, and require it to name the contradiction: a checker
that cannot fail proves nothing.
"""

import pytest
from django.conf import settings

from tests.faults.fence_history import (
    ACKNOWLEDGED_WRITE_LOST,
    FENCED_MUTEX,
    STALE_GRANT_WON,
    TOKEN_NOT_RISING,
    UNATTEMPTED_WRITE,
    ClientOp,
    Violation,
    Write,
    check_fence_history,
)
from tests.faults.scenario import find, run_scenario
from tests.faults.scenarios.nemesis import NemesisPlan, play
from tests.faults.seed import seed_world
from tests.faults.stack import Stack, StackOptions
from tests.harness.processes import django_database_url

ROUNDS = 4
MIN_WRITES = 8


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker):
    """A private redis-server (behind the suite's proxy) for this test database; no app."""
    system = Stack(StackOptions(secret_key=settings.SECRET_KEY, database_url=django_database_url()))
    try:
        yield system.start_services()
    finally:
        system.stop()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_nemesis_finds_no_older_grant_winning_across_pauses_and_redis_wipes(stack):
    world = seed_world(users=2)
    plan = NemesisPlan.from_env(rounds=ROUNDS)
    spec, _ = find("9-nemesis")
    result = run_scenario(stack, world, spec, lambda s: play(s, plan))
    facts = result.facts
    context = "\n".join([result.observed, *result.violations, *result.surprises])
    assert result.violations == [], context
    assert result.surprises == [], context
    assert facts["rounds"] == ROUNDS, context
    assert facts["pauses"] >= 2 * ROUNDS, context
    assert facts["flushall"] + facts["restarts"] == ROUNDS, context
    # At least one round had two unwritten frozen grants and a newer write after the wipe:
    # the interleaving the scenario exists for really happened.
    assert facts["sharp rounds"] >= 1, context
    assert facts["writes"] >= MIN_WRITES, context
    assert facts["acknowledged"] <= facts["writes"], context
    assert len(result.ops) == facts["attempts"], context


# -- the checker catches contradictions ------------------------------------------------------


def _write(seq, client, op, token, t_request, t_granted) -> Write:
    return Write(seq, client, op, token, t_request, t_granted)


def _told(client, op, outcome, token, t_request, t_granted=None, t_ack=None) -> ClientOp:
    granted = t_granted if t_granted is not None else t_request + 0.01
    return ClientOp(
        client=client,
        op=op,
        outcome=outcome,
        t_request=t_request,
        t_ack=t_ack if t_ack is not None else granted + 0.1,
        token=token,
        t_granted=granted,
    )


def test_checker_accepts_a_consistent_history_with_refusals_and_unknown_answers():
    writes = [_write(1, 0, 1, 5, 10.0, 10.01), _write(2, 1, 1, 7, 10.5, 10.6)]
    attempts = [
        _told(0, 1, "committed", 5, 10.0, 10.01),
        _told(1, 1, "committed", 7, 10.5, 10.6),
        _told(2, 1, "stale", 6, 10.2),
        _told(2, 2, "busy", None, 10.3),
        _told(0, 2, "error", 8, 11.0),  # unknown answer, not written: allowed
    ]
    report = check_fence_history(writes, attempts)
    assert report.violations == []
    assert (report.writes, report.acknowledged, report.attempts) == (2, 2, 5)
    assert report.outcomes == {"busy": 1, "committed": 2, "error": 1, "stale": 1}


def test_checker_names_an_older_grant_committing_after_a_newer_request():
    # Today's counter-loss bug: client 1 was granted token 12 at t=1.0 and frozen; Redis
    # lost its data; client 2 asked at t=3.0, was re-issued token 11, and wrote it; client
    # 1, resumed, wrote 12 after it. Tokens still rise: only the grant times show it.
    writes = [
        _write(1, 0, 1, 10, 0.0, 0.1),
        _write(2, 2, 4, 11, 3.0, 3.2),
        _write(3, 1, 7, 12, 0.9, 1.0),
    ]
    attempts = [
        _told(0, 1, "committed", 10, 0.0, 0.1),
        _told(2, 4, "committed", 11, 3.0, 3.2),
        _told(1, 7, "committed", 12, 0.9, 1.0),
    ]
    report = check_fence_history(writes, attempts)
    assert report.violations == [
        Violation(
            STALE_GRANT_WON,
            "write #3 (client 1 op 7, token 12) committed after write #2 (client 2 op 4, "
            "token 11), but its grant arrived 2.000s before that write's request: an older "
            "grant overwrote newer work",
        ),
        # What the clients were told breaks the fenced-mutex model too: token 12 was
        # acknowledged before client 2 asked, and client 2 was acknowledged 11.
        Violation(
            FENCED_MUTEX,
            "client 2 op 4 was acknowledged token 11, not above token 12 that client 1 op 7 "
            "was acknowledged before it asked",
        ),
    ]
    assert report.by_rule() == {STALE_GRANT_WON: 1, FENCED_MUTEX: 1}


def test_checker_lets_overlapping_grants_commit_in_either_order():
    # Client 1's grant arrived after client 0 asked: their grants overlap in real time, so
    # either may be the newer; committing after client 0 proves nothing wrong.
    writes = [_write(1, 0, 1, 3, 1.0, 1.5), _write(2, 1, 1, 4, 0.5, 1.2)]
    attempts = [_told(0, 1, "committed", 3, 1.0, 1.5), _told(1, 1, "committed", 4, 0.5, 1.2)]
    assert check_fence_history(writes, attempts).violations == []


def test_checker_names_an_acknowledged_write_that_is_missing_or_has_another_token():
    writes = [_write(1, 0, 1, 5, 0.0, 0.1)]
    attempts = [
        _told(0, 1, "committed", 6, 0.0, 0.1),
        _told(1, 3, "committed", 7, 0.5, 0.6),
    ]
    report = check_fence_history(writes, attempts)
    assert [str(violation) for violation in report.violations] == [
        f"[{ACKNOWLEDGED_WRITE_LOST}] client 0 op 1 was told committed with token 6; the "
        "history has write #1 (client 0 op 1, token 5)",
        f"[{ACKNOWLEDGED_WRITE_LOST}] client 1 op 3 was told committed (token 7); no such "
        "write in the history",
    ]


def test_checker_names_tokens_that_do_not_rise_in_commit_order():
    writes = [
        _write(1, 0, 1, 5, 0.0, 0.1),
        _write(2, 1, 1, 5, 0.2, 0.3),
        _write(3, 2, 1, 4, 0.4, 0.5),
    ]
    attempts = [_told(w.client, w.op, "committed", w.token, w.t_request) for w in writes]
    report = check_fence_history(writes, attempts)
    assert report.violations == [
        Violation(
            TOKEN_NOT_RISING,
            "write #2 (client 1 op 1, token 5) committed after write #1 (client 0 op 1, token 5)",
        ),
        Violation(
            TOKEN_NOT_RISING,
            "write #3 (client 2 op 1, token 4) committed after write #2 (client 1 op 1, token 5)",
        ),
        # Each was acknowledged before the next asked: the clients' answers show it too.
        Violation(
            FENCED_MUTEX,
            "client 1 op 1 was acknowledged token 5, not above token 5 that client 0 op 1 was "
            "acknowledged before it asked",
        ),
        Violation(
            FENCED_MUTEX,
            "client 2 op 1 was acknowledged token 4, not above token 5 that client 0 op 1 was "
            "acknowledged before it asked",
        ),
    ]


def test_checker_names_writes_no_client_attempted_was_told_refused_or_repeated():
    writes = [
        _write(1, 0, 1, 5, 0.0, 0.1),
        _write(2, 0, 2, 6, 0.2, 0.3),
        _write(3, 9, 9, 7, 0.4, 0.5),
        _write(4, 0, 1, 8, 0.6, 0.7),
    ]
    attempts = [_told(0, 1, "committed", 5, 0.0, 0.1), _told(0, 2, "stale", 6, 0.2, 0.3)]
    report = check_fence_history(writes, attempts)
    assert [str(violation) for violation in report.violations] == [
        f"[{UNATTEMPTED_WRITE}] client 0 op 2 was told stale, yet write #2 (client 0 op 2, "
        "token 6) is in the history",
        f"[{UNATTEMPTED_WRITE}] write #3 (client 9 op 9, token 7) was attempted by no client",
        f"[{UNATTEMPTED_WRITE}] write #4 (client 0 op 1, token 8) repeats write #1 (client 0 "
        "op 1, token 5)",
    ]
