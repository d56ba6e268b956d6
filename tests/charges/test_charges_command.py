"""``manage.py generate_monthly_charges`` as cron runs it: a child process, exit codes, and
one line on stderr when it refuses."""

import getpass
import os
import re
import signal
import subprocess
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.operations import charge_resource
from charges.services import generate_monthly_charges
from hoa.management.base import EXIT_TEMPFAIL
from hoa.models import Organization, Unit
from hoa.operations import operations
from locking import FenceLock
from locking.models import FenceEpoch, FenceEvent
from tests.charges_support import MONTH, MONTH_ARG, dead_redis_url, wait_for_lease_expiry
from tests.conftest import direct_postgres_only
from tests.harness.processes import process_state, run_manage, start_manage
from tests.harness.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

COMMAND = "generate_monthly_charges"
MAPLE_TOTAL = sum(Decimal("200.00") + n for n in range(1, 11))
OS_USER = getpass.getuser()


@pytest.fixture
def command_env(subprocess_env, http_stub):
    # LOG_LEVEL=ERROR keeps the INFO logs of a successful run off stderr, so the tests can
    # assert that a refusal is exactly one line there.
    return {
        **subprocess_env,
        "BILLING_WEBHOOK_URL": http_stub.url_for("billing"),
        "LOG_LEVEL": "ERROR",
    }


def start_command(*args, env) -> subprocess.Popen:
    return start_manage(COMMAND, *args, env=env)


def hold_lease(organization, holder="bob at the front desk"):
    return FenceLock().acquire(
        charge_resource(organization, MONTH), ttl=timedelta(seconds=30), holder=holder
    )


def assert_nothing_written():
    assert not MonthlyChargeRun.objects.exists()
    assert not MonthlyCharge.objects.exists()


def test_command_generates_charges_then_reports_them_already_generated(
    maple, command_env, http_stub
):
    first = run_manage(COMMAND, "--org", "maple-court", "--month", MONTH_ARG, env=command_env)
    second = run_manage(COMMAND, "--org", "maple-court", "--month", MONTH_ARG, env=command_env)

    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout == (
        f"Generated 10 charges for Maple Court, March 2026 (total ${MAPLE_TOTAL:,.2f}).\n"
    )
    assert (second.returncode, second.stderr) == (0, "")
    assert second.stdout == (
        f"Charges for Maple Court, March 2026 were already generated "
        f"(10 charges, total ${MAPLE_TOTAL:,.2f}).\n"
    )
    run = MonthlyChargeRun.objects.get(organization=maple, month=MONTH)
    assert (run.charge_count, run.total, run.last_fence_token) == (10, MAPLE_TOTAL, 2)
    assert run.completed_by == f"cli:{OS_USER}"
    assert MonthlyCharge.objects.filter(run=run).count() == 10
    [request] = http_stub.received
    assert (request.idempotency_key, request.token) == (f"monthly-charges:{maple.pk}:2026-03", 1)
    event = FenceEvent.objects.get(outcome="committed")
    assert event.actor == f"cli:{OS_USER}"
    assert event.scope == f"org:{maple.pk}"


def test_command_refuses_bad_input_with_one_line_and_writes_nothing(maple, command_env, http_stub):
    cases = {
        ("--org", "no-such-org", "--month", MONTH_ARG): 'Unknown organization "no-such-org".',
        ("--org", "maple-court", "--month", "2026-13"): (
            '"2026-13" is not a month: the month must be 01 to 12.'
        ),
    }
    running = {args: start_command(*args, env=command_env) for args in cases}
    for args, process in running.items():
        stdout, stderr = process.communicate(timeout=60)
        assert (process.returncode, stdout) == (1, ""), args
        assert stderr == f"CommandError: {cases[args]}\n", args
    assert_nothing_written()
    assert not FenceEvent.objects.exists()
    assert http_stub.received == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--org", "maple-court", "--month", "March"), '"March" is not a month: use YYYY-MM'),
        (("--org", "maple-court", "--actor", "ghost"), 'No active user "ghost".'),
        (
            ("--org", "maple-court", "--actor", "viewer"),
            "viewer may not generate charges for Maple Court.",
        ),
        (
            ("--org", "maple-court", "--actor", "mallory"),
            'No organization "maple-court" for mallory.',
        ),
        (("--org", "maple-court", "--workers", "2"), "--workers only applies to --all-orgs."),
        (("--all-orgs", "--workers", "0"), "--workers must be at least 1."),
    ],
)
def test_command_refuses_bad_arguments_before_locking_anything(
    maple, mallory, viewer, args, message
):
    with pytest.raises(CommandError) as excinfo:
        call_command(COMMAND, *args, stdout=StringIO(), stderr=StringIO())
    assert str(excinfo.value).startswith(message)
    assert excinfo.value.returncode == 1
    assert_nothing_written()
    assert not FenceEvent.objects.exists()


def test_command_exits_75_naming_the_holder_when_busy(maple, command_env, http_stub):
    hold_lease(maple)
    result = run_manage(COMMAND, "--org", "maple-court", "--month", MONTH_ARG, env=command_env)

    assert result.returncode == EXIT_TEMPFAIL
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("CommandError: Another holder (bob at the front desk on ")
    assert ") is generating the charges for Maple Court, March 2026; " in line
    assert re.search(r"; try again in \d+ seconds\.$", line), line
    assert_nothing_written()
    assert http_stub.received == []


def test_command_exits_1_with_one_line_when_redis_is_down(maple, command_env, http_stub):
    url = dead_redis_url()
    env = {**command_env, "REDIS_URL": url, "LOCK_REDIS_URL": url}
    result = run_manage(COMMAND, "--org", "maple-court", "--month", MONTH_ARG, env=env)

    assert (result.returncode, result.stdout) == (1, "")
    [line] = result.stderr.splitlines()
    assert line.startswith(f"CommandError: Redis is unreachable ({url}):")
    assert_nothing_written()
    assert http_stub.received == []


def test_command_exits_1_and_writes_nothing_when_billing_fails(maple, command_env, http_stub):
    http_stub.status = 422
    result = run_manage(COMMAND, "--org", "maple-court", "--month", MONTH_ARG, env=command_env)

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "CommandError: Generating the charges for Maple Court, March 2026 failed: the billing "
        "system did not accept it (HTTP 422); nothing was saved.\n"
    )
    assert_nothing_written()
    assert list(FenceEvent.objects.values_list("outcome", "token")) == [("failed", 1)]


@pytest.mark.slow
def test_command_frozen_by_sigstop_is_rejected_after_a_newer_holder_commits(
    maple, command_env, http_stub, settings, redis_client
):
    settings.BILLING_WEBHOOK_URL = http_stub.url_for("billing")
    gate = http_stub.hold(lambda request: request.token == 1)
    # A short lease for the child; --skip-checks because the system check (rightly) warns
    # that its billing timeout is longer than that lease.
    env = {**command_env, "CHARGES_LOCK_TTL_SECONDS": "0.5"}
    holder_a = start_command("--org", "maple-court", "--month", MONTH_ARG, "--skip-checks", env=env)
    try:
        gate.wait_arrived(1, timeout=60)  # A holds token 1 and is inside its billing call
        os.kill(holder_a.pid, signal.SIGSTOP)
        wait_until(lambda: process_state(holder_a.pid) == "T", what="holder A to stop")
        gate.release()  # the answer waits in A's socket while A is frozen
        wait_for_lease_expiry(redis_client, maple)

        result_b = generate_monthly_charges(
            organization=maple, month=MONTH, actor=None, via="holder-b"
        )
        assert (result_b.outcome, result_b.token) == ("committed", 2)

        os.kill(holder_a.pid, signal.SIGCONT)
        stdout, stderr = holder_a.communicate(timeout=60)
    finally:
        if holder_a.poll() is None:
            os.kill(holder_a.pid, signal.SIGCONT)
            holder_a.kill()
            holder_a.wait()

    assert (holder_a.returncode, stdout) == (EXIT_TEMPFAIL, "")
    assert stderr == (
        "CommandError: A newer holder (token 2) took over generating the charges for Maple "
        "Court, March 2026 while this attempt (token 1) was paused past its lease; nothing of "
        "this attempt was written; the billing system was told in vain; nothing to take back\n"
    )
    run = MonthlyChargeRun.objects.get(organization=maple, month=MONTH)
    assert (run.completed_by, run.last_fence_token, run.charge_count) == ("holder-b", 2, 10)
    assert MonthlyCharge.objects.filter(run=run).count() == 10
    assert list(FenceEvent.objects.order_by("id").values_list("outcome", "token")) == [
        ("committed", 2),
        ("stale", 1),
    ]
    assert sorted(request.token for request in http_stub.received) == [1, 2]


def test_command_whose_billing_call_arrives_after_a_newer_holders_exits_75(
    maple, command_env, http_stub, settings, redis_client
):
    """Billing's receiver refuses the late call (409): the command answers stale, exit 75,
    like a refusal by the fence, not 1 like a failed call."""
    settings.BILLING_WEBHOOK_URL = http_stub.url_for("billing")
    gate = http_stub.hold(lambda request: request.token == 1)  # A's call is on its way
    env = {**command_env, "CHARGES_LOCK_TTL_SECONDS": "0.5"}
    holder_a = start_command("--org", "maple-court", "--month", MONTH_ARG, "--skip-checks", env=env)
    try:
        gate.wait_arrived(1, timeout=60)
        wait_for_lease_expiry(redis_client, maple)
        result_b = generate_monthly_charges(
            organization=maple, month=MONTH, actor=None, via="holder-b"
        )
        gate.release()
        stdout, stderr = holder_a.communicate(timeout=60)
    finally:
        gate.release()
        if holder_a.poll() is None:
            holder_a.kill()
            holder_a.wait()

    assert (result_b.outcome, result_b.token) == ("committed", 2)
    assert (holder_a.returncode, stdout) == (EXIT_TEMPFAIL, "")
    assert stderr == (
        "CommandError: A newer holder (token 2) took over generating the charges for Maple "
        "Court, March 2026 while this attempt (token 1) was paused past its lease; nothing of "
        "this attempt was written.\n"
    )
    assert list(FenceEvent.objects.order_by("id").values_list("outcome", "token")) == [
        ("committed", 2),
        ("stale", 1),
    ]
    assert [(r.token, r.status) for r in http_stub.received] == [(2, 200), (1, 409)]


@pytest.mark.slow
def test_eight_command_processes_racing_make_one_run(maple, command_env, http_stub):
    gate = http_stub.hold()  # the winner waits in billing until every loser has exited
    # The seven losers start Django one after another on a busy machine (other xdist
    # workers too): the winner's billing call and its lease must outlast them. Every
    # operation's lease outlives the timeout: the check of the two (hoa.W001) stays quiet.
    leases = {operation.ttl_setting: "240" for operation in operations() if operation.ttl_setting}
    env = {**command_env, "EXTERNAL_CALL_TIMEOUT_SECONDS": "120", **leases}
    racers = [
        start_command("--org", "maple-court", "--month", MONTH_ARG, env=env) for _ in range(8)
    ]
    try:
        gate.wait_arrived(1, timeout=60)
        wait_until(lambda: sum(p.poll() is not None for p in racers) == 7, timeout=60)
        gate.release()
        outputs = [p.communicate(timeout=60) for p in racers]
        answers = [(p.returncode, *output) for p, output in zip(racers, outputs, strict=True)]
    finally:
        for process in racers:
            if process.poll() is None:
                process.kill()
                process.wait()

    assert Counter(code for code, _, _ in answers) == {EXIT_TEMPFAIL: 7, 0: 1}
    for code, stdout, stderr in answers:
        if code == EXIT_TEMPFAIL:
            assert stderr.startswith("CommandError: Another holder (")
            assert ") is generating the charges for Maple Court, March 2026; " in stderr
            assert len(stderr.splitlines()) == 1
        else:
            assert stdout.startswith("Generated 10 charges for Maple Court, March 2026")
    assert MonthlyChargeRun.objects.count() == 1
    assert MonthlyCharge.objects.count() == 10
    assert len(http_stub.received) == 1


# -- every organization ----------------------------------------------------------------------


def add_organizations(count: int) -> None:
    for number in range(count):
        org = Organization.objects.create(name=f"Cedar {number}", slug=f"cedar-{number}")
        for unit in range(1, number + 3):
            Unit.objects.create(organization=org, label=f"C{unit}", monthly_assessment=100 + unit)


def outcome_by_org(month):
    return {
        run.organization.slug: (run.status, run.charge_count, run.total)
        for run in MonthlyChargeRun.objects.filter(month=month).select_related("organization")
    }


def test_all_orgs_with_two_workers_gives_the_result_of_one_worker(
    maple, oak, command_env, http_stub
):
    add_organizations(4)
    two = run_manage(COMMAND, "--all-orgs", "--month", "2026-03", "--workers", "2", env=command_env)
    one = run_manage(COMMAND, "--all-orgs", "--month", "2026-04", "--workers", "1", env=command_env)

    for result in (two, one):
        assert (result.returncode, result.stderr) == (0, ""), result.stderr
        assert result.stdout.splitlines()[-1].endswith(
            ": 6 associations: 6 generated here, 0 already done, 0 by another worker, 0 failed."
        )
    expected = {
        org.slug: (
            "completed",
            org.units.count(),
            sum(u.monthly_assessment for u in org.units.all()),
        )
        for org in Organization.objects.all()
    }
    assert outcome_by_org(MONTH) == expected
    assert outcome_by_org(MONTH.replace(month=4)) == expected
    assert MonthlyCharge.objects.count() == 2 * sum(count for _, count, _ in expected.values())
    assert Counter(r.json["month"] for r in http_stub.received) == {"2026-03": 6, "2026-04": 6}


def test_all_orgs_exits_75_when_an_organization_is_still_busy_at_the_deadline(
    maple, oak, command_env
):
    lease = hold_lease(oak)
    first = run_manage(COMMAND, "--all-orgs", "--month", MONTH_ARG, "--wait", "0", "-v", "2",
                       env=command_env)  # fmt: skip
    lease.release()
    second = run_manage(COMMAND, "--all-orgs", "--month", MONTH_ARG, "-v", "2", env=command_env)

    assert first.returncode == EXIT_TEMPFAIL
    lines = first.stdout.splitlines()
    assert lines[0].startswith("maple-court: Generated 10 charges")
    assert lines[1].startswith("oak-ridge: Another holder (bob")
    assert ") is generating the charges for Oak Ridge, March 2026; try again in " in lines[1]
    assert lines[-1] == (
        "March 2026: 2 associations: 1 generated here, 0 already done, 0 by another worker, "
        "0 failed, 1 unfinished."
    )
    assert first.stderr == (
        "CommandError: 1 association was still busy after waiting 0 s; run again later "
        "to confirm.\n"
    )
    assert (second.returncode, second.stderr) == (0, "")
    assert second.stdout.splitlines() == [
        f"maple-court: Charges for Maple Court, March 2026 were already generated "
        f"(10 charges, total ${MAPLE_TOTAL:,.2f}).",
        "oak-ridge: Generated 5 charges for Oak Ridge, March 2026 (total $1,500.00).",
        # Maple Court was billed by the first run: done before this one, not by another worker.
        "March 2026: 2 associations: 1 generated here, 1 already done, 0 by another worker, "
        "0 failed.",
    ]
    assert MonthlyCharge.objects.count() == 15


def test_all_orgs_waits_for_a_held_organization_and_exits_0_once_it_is_done(
    maple, oak, command_env
):
    lease = hold_lease(oak)
    child = start_manage(COMMAND, "--all-orgs", "--month", MONTH_ARG, "--wait", "60",
                         env=command_env)  # fmt: skip
    try:
        # Hold point: the command met the held lease (its refusal is recorded) and waits.
        wait_until(
            lambda: FenceEvent.objects.filter(outcome="busy").exists(), what="the busy answer"
        )
        lease.release()  # the holder went away without billing: the waiting host retries
        stdout, stderr = child.communicate(timeout=60)
    finally:
        child.kill() if child.poll() is None else None

    assert (child.returncode, stderr) == (0, "")
    assert stdout.splitlines() == [
        "March 2026: 2 associations: 2 generated here, 0 already done, 0 by another worker, "
        "0 failed."
    ]
    assert MonthlyCharge.objects.count() == 15


def test_cron_run_prints_nothing_on_success_and_bad_arguments_are_one_line_exit_1(
    maple, command_env
):
    quiet = run_manage(COMMAND, "--org", "maple-court", "--month", MONTH_ARG, "-v", "0",
                       env=command_env)  # fmt: skip
    both = run_manage(COMMAND, "--org", "maple-court", "--all-orgs", env=command_env)
    neither = run_manage(COMMAND, env=command_env)
    not_a_number = run_manage(COMMAND, "--all-orgs", "--workers", "abc", env=command_env)

    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    assert (both.returncode, both.stdout) == (1, "")
    assert both.stderr == ("CommandError: argument --all-orgs: not allowed with argument --org\n")
    assert (neither.returncode, neither.stderr.count("\n")) == (1, 1)
    assert neither.stderr.startswith("CommandError: one of the arguments --org --all-orgs")
    assert not_a_number.returncode == 1
    assert not_a_number.stderr == ("CommandError: argument --workers: invalid int value: 'abc'\n")


def test_all_orgs_with_an_actor_walks_only_their_organizations(alice, oak, settings, http_stub):
    settings.BILLING_WEBHOOK_URL = http_stub.url_for("billing")
    stdout = StringIO()
    call_command(COMMAND, "--all-orgs", "--month", MONTH_ARG, "--actor", "alice", stdout=stdout)

    assert stdout.getvalue().splitlines()[-1] == (
        "March 2026: 1 association: 1 generated here, 0 already done, 0 by another worker, "
        "0 failed."
    )
    assert list(MonthlyChargeRun.objects.values_list("organization__slug", flat=True)) == [
        "maple-court"
    ]
    run = MonthlyChargeRun.objects.get()
    assert run.completed_by == f"alice via cli:{OS_USER}"


def test_all_orgs_records_the_new_months_fence_epochs_in_one_statement(
    maple, oak, settings, http_stub
):
    settings.BILLING_WEBHOOK_URL = http_stub.url_for("billing")
    with CaptureQueriesContext(connection) as queries:
        call_command(COMMAND, "--all-orgs", "--month", MONTH_ARG, stdout=StringIO())

    # Each association's first grant of the month would record its epoch with a commit of
    # its own; the worker records its chunk's at once (prepare_fences).
    statements = [query["sql"].strip() for query in queries.captured_queries]
    epoch_writes = [sql for sql in statements if sql.startswith("INSERT INTO locking_fenceepoch")]
    assert len(epoch_writes) == 1
    resources = [charge_resource(org, MONTH) for org in (maple, oak)]
    assert sorted(FenceEpoch.objects.values_list("resource", "epoch")) == sorted(
        (resource, 0) for resource in resources
    )
    assert MonthlyChargeRun.objects.completed().count() == 2


@direct_postgres_only
def test_command_exits_1_with_one_line_when_postgresql_goes_away_mid_run(
    maple, command_env, http_stub
):
    # The child's connection is found by its application_name (libpq reads PGAPPNAME) and
    # killed while the child waits in its billing call, before its transaction.
    gate = http_stub.hold()
    env = {**command_env, "PGAPPNAME": "charges-command-under-test"}
    child = start_command("--org", "maple-court", "--month", MONTH_ARG, env=env)
    try:
        gate.wait_arrived(1, timeout=60)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = %s",
                ["charges-command-under-test"],
            )
            assert cursor.fetchone()[0] >= 1
        gate.release()
        stdout, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    assert (child.returncode, stdout) == (1, "")
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith(
        "CommandError: PostgreSQL error (the failed transaction was rolled back): "
    )
    assert_nothing_written()

    result = run_manage(COMMAND, "--org", "maple-court", "--month", MONTH_ARG, env=command_env)
    assert result.returncode == 0, result.stderr
    assert MonthlyCharge.objects.count() == 10


@pytest.mark.django_db
def test_a_month_outside_the_billing_window_exits_1_naming_the_range(maple, settings):
    settings.CHARGE_MONTHS_BACK, settings.CHARGE_MONTHS_AHEAD = 24, 3
    with pytest.raises(CommandError) as excinfo:
        call_command(COMMAND, "--org", "maple-court", "--month", "0001-01", stdout=StringIO())
    assert excinfo.value.returncode == 1
    assert str(excinfo.value).startswith("0001-01 is outside the billing window: ")
    assert_nothing_written()


def test_two_hosts_walking_the_month_at_once_bill_every_association_exactly_once(
    maple, oak, command_env, http_stub
):
    # Two cron hosts, each with two workers, started together on the same month: every
    # association gets one completed run with one charge per unit, billed once, and both
    # hosts exit 0 (what one skipped as held by the other, it confirms at the end).
    add_organizations(10)
    args = (COMMAND, "--all-orgs", "--month", MONTH_ARG, "--workers", "2", "--wait", "60")
    hosts = [start_manage(*args, env=command_env) for _ in range(2)]
    results = [host.communicate(timeout=120) for host in hosts]

    assert [host.returncode for host in hosts] == [0, 0], results
    expected = {
        org.slug: (
            "completed",
            org.units.count(),
            sum(u.monthly_assessment for u in org.units.all()),
        )
        for org in Organization.objects.all()
    }
    assert outcome_by_org(MONTH) == expected
    charged = Counter(MonthlyCharge.objects.values_list("run__organization__slug", flat=True))
    assert charged == Counter({slug: count for slug, (_, count, _) in expected.items()})
    billed = Counter(r.json["organization"]["slug"] for r in http_stub.received)
    assert billed == Counter(dict.fromkeys(expected, 1))
    summaries = [stdout.splitlines()[-1] for stdout, _ in results]
    here = [int(re.search(r"(\d+) generated here", line).group(1)) for line in summaries]
    assert sum(here) == len(expected), summaries
