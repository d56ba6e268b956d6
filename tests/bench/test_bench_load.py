"""``make bench-load``'s judgement: per page and action its percentiles (p99 only from 1,000
requests on), answers against errors (a 409 is an answer), the knee, and the goals.

The figures are made up; the harness itself is tried by ``make bench-load QUICK=1``, and its
stand-in for the outside services against what the project really sends."""

from datetime import UTC, datetime, timedelta

import pytest

from bench.environment import start_receiver
from bench.load_report import knee, server_samples, stats, targets
from charges.billing import ENDPOINT as BILLING_ENDPOINT
from hoa.integrations.webhooks import post_fenced
from locking import FenceLock
from vendors.dispatch import CANCEL_ENDPOINT, DISPATCH_ENDPOINT


def _step(users: int, p99: float) -> dict:
    return {"users": users, "overall": {"all_p99_ms": p99}}


def test_p99_is_given_from_1000_requests_on_and_a_409_is_an_answer_not_an_error():
    few = [[float(ms), 303] for ms in range(1, 998)] + [[5.0, 409], [7.0, 500]]  # 999
    many = [[float(ms), 200] for ms in range(1, 1001)] + [[3.0, 0]]

    small, large = stats(few, seconds=100), stats(many, seconds=100)

    assert (small["requests"], small["p99_ms"], small["median_ms"], small["max_ms"]) == (
        999, None, 498.0, 997.0
    )  # fmt: skip
    assert (small["answered_409"], small["errors_5xx"], small["no_answer"]) == (1, 1, 0)
    assert (large["p99_ms"], large["per_s"], large["no_answer"]) == (990.0, 10.01, 1)


def test_the_knee_is_the_last_step_before_p99_bends_past_twice_the_first_and_the_line():
    steps = [_step(250, 120.0), _step(500, 180.0), _step(1000, 260.0), _step(1500, 900.0)]

    found = knee(steps, bend=2.0, line_ms=300.0)

    # 260 ms is over twice 120 but under the line: not bent yet.
    assert (found["knee_users"], found["bent_at_users"]) == (1000, 1500)
    assert found["served_within_line_users"] == 1000
    assert found["over_the_line_from_the_first"] is False


def test_a_first_step_over_the_line_puts_the_knee_below_it():
    found = knee([_step(250, 900.0), _step(500, 1500.0)], bend=2.0, line_ms=300.0)

    assert (found["knee_users"], found["served_within_line_users"]) == (None, None)
    assert found["over_the_line_from_the_first"] is True


def test_a_step_too_short_to_count_a_request_neither_bends_nor_serves():
    # 60 s at 500 staff: their arrivals (100 s at 5 a second) and one pacing interval over.
    found = knee([_step(250, 120.0), _step(500, None)], bend=2.0, line_ms=300.0)

    assert (found["knee_users"], found["bent_at_users"]) == (None, None)
    assert found["served_within_line_users"] == 250


def _run(by_name: dict, errors: int = 0, locust: dict | None = None) -> dict:
    """A run whose server took ``by_name``; Locust measured ``locust`` (the same if None)."""
    return {
        "server_steps": [{"by_name": by_name, "overall": {"errors_5xx": errors}}],
        "steps": [{"by_name": locust or by_name, "overall": {"errors_5xx": errors}}],
    }


def _action(p99, median) -> dict:
    return {"p99_ms": p99, "median_ms": median}


def test_each_fenced_action_is_judged_on_the_servers_p99_when_both_runs_have_enough():
    """On the server's times (its p99, else its median); Locust's ratio is reported beside."""
    fenced = _run(
        {"action: change status": _action(130.0, 40.0),
         "action: assign a vendor": _action(None, 60.0),
         "action: reassign a vendor": _action(300.0, 70.0)},
        locust={"action: change status": _action(1100.0, 900.0)},
    )  # fmt: skip
    baseline = _run(
        {"action: change status": _action(100.0, 35.0),
         "action: assign a vendor": _action(None, 50.0),
         "action: reassign a vendor": _action(None, 70.0)},
        errors=1,
        locust={"action: change status": _action(1000.0, 800.0)},
    )  # fmt: skip
    checked = {"fenced": {"checker": {"exit_code": 0, "output": ["0 invariant violations"]}}}

    judged = [(t["text"], t["measured"], t["status"]) for t in targets(
        {"fenced": fenced, "baseline": baseline}, checked)]  # fmt: skip

    assert judged == [
        ("action: change status: server p99 ≤ 1.2x its twin's", 1.3, "MISS"),
        ("action: assign a vendor: server median (under 1,000 requests) ≤ 1.2x its twin's", 1.2,
         "PASS"),
        ("action: reassign a vendor: server median (under 1,000 requests) ≤ 1.2x its twin's",
         1.0, "PASS"),
        ("action: generate a month: server p99 ≤ 1.2x its twin's", None, "MISS"),
        ("action: pay an invoice: server p99 ≤ 1.2x its twin's", None, "MISS"),
        ("action: change status: Locust's p99 ≤ 1.2x its twin's", 1.1, "INFO"),
        ("action: assign a vendor: Locust's p99 ≤ 1.2x its twin's", None, "INFO"),
        ("action: reassign a vendor: Locust's p99 ≤ 1.2x its twin's", None, "INFO"),
        ("action: generate a month: Locust's p99 ≤ 1.2x its twin's", None, "INFO"),
        ("action: pay an invoice: Locust's p99 ≤ 1.2x its twin's", None, "INFO"),
        ("no 5xx in any step of any run", 1, "MISS"),
        ("the fault suite's invariants hold after the fenced run (tests.faults.check)",
         "0 invariant violations", "PASS"),
    ]  # fmt: skip


def test_the_servers_times_are_read_from_the_access_log_into_the_steps_they_ended_in():
    """gunicorn's lines (ACCESS_LOG_FORMAT) land in the step whose measured window they
    ended in, by the wall clock: the steps are on Locust's monotonic clock plus its offset."""
    stamp = "[05/Dec/2026:16:00:{:02d} +0000]"
    wall = datetime(2026, 12, 5, 16, 0, tzinfo=UTC).timestamp()  # 16:00:00
    offset = wall - 1000.0  # monotonic 1000.0 is 16:00:00
    steps = [
        {"users": 250, "measure_from": 1005.0, "ended": 1020.0},  # 16:00:05 to 16:00:20
        {"users": 500, "measure_from": 1030.0, "ended": 1050.0},  # 16:00:30 to 16:00:50
        {},  # a step never reached
    ]
    lines = [
        f"{stamp.format(1)}|200|1500|page: dashboard\n",  # warm-up of the first step
        f"{stamp.format(6)}|200|2500|page: dashboard\n",
        f"{stamp.format(7)}|303|40250|action: assign a vendor\n",
        f"{stamp.format(8)}|200|900|-\n",  # not Locust's: no name
        f"{stamp.format(25)}|200|1000|page: dashboard\n",  # between the steps
        f"{stamp.format(31)}|409|12000|action: assign a vendor\n",
        "a line of another format\n",
    ]

    found = server_samples(lines, steps, offset)

    assert found == [
        {"page: dashboard": [[2.5, 200]], "action: assign a vendor": [[40.25, 303]]},
        {"action: assign a vendor": [[12.0, 409]]},
        {},
    ]


def test_a_violation_found_by_the_checker_fails_the_run():
    checked = {"fenced": {"checker": {"exit_code": 1, "output": ["1 invariant violations"]}}}

    [*_, invariants] = targets({"fenced": _run({})}, checked)

    assert (invariants["measured"], invariants["status"]) == ("1 invariant violations", "FAIL")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("path", "endpoint"),
    [("/billing", BILLING_ENDPOINT), ("/dispatch", DISPATCH_ENDPOINT),
     ("/dispatch/cancel", CANCEL_ENDPOINT)],
)  # fmt: skip
def test_the_stand_in_accepts_what_the_project_seals_for_its_endpoint(settings, path, endpoint):
    """The busiest hour's stand-in receives as locking's receiver, scoped to the endpoint
    each path is. It once scoped to the path itself ("/billing"), which no seal names: every
    billing and dispatch call was refused, and the fenced run answered 502 throughout."""
    secret = "bench-load-stand-in"
    settings.WEBHOOK_SIGNING_SECRET = secret
    server, url = start_receiver(secret)
    lease = FenceLock().acquire(f"bench-load:stand-in:{endpoint}", ttl=timedelta(seconds=10))
    try:
        post_fenced(f"{url}{path}", {"n": 1}, idempotency_key="k-1", token=lease, endpoint=endpoint)
    finally:
        lease.release()
        server.shutdown()
        server.server_close()

    [call] = server.calls
    assert (call["path"], call["status"], call["token"]) == (path, 200, str(lease.token))
    assert call["verdict"] == "accepted"
