"""Issue 25, item 8: quiet cron.

Run as cron runs them (``manage.py`` children, stdout a pipe, ``LOG_LEVEL`` unset), the
commands log at WARNING and print nothing when they succeed, unless ``-v`` asks; a bad
argument is one line and exit 1 (``seed_demo`` too); a month done before the run is
"already done", not "by another worker"; plurals are right.
"""

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from charges.models import MonthlyChargeRun
from charges.operations import charge_resource
from charges.services import generate_monthly_charges
from hoa.models import AccessDenial
from locking import FenceLock
from locking.models import FenceEvent
from tests.charges_support import MONTH, MONTH_ARG
from tests.harness.processes import BASE_DIR, run_manage, start_manage
from tests.harness.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cron_env(subprocess_env):
    """What cron gives a job: no LOG_LEVEL, no DJANGO_LOG_LEVEL, no billing endpoint (the
    skipped call is logged at INFO, which cron must not see)."""
    env = dict(subprocess_env)
    for name in ("LOG_LEVEL", "DJANGO_LOG_LEVEL", "BILLING_WEBHOOK_URL", "VENDOR_DISPATCH_URL"):
        env.pop(name, None)
    # A payment service is configured (without one the payment run refuses to start); with
    # nothing due, nothing is sent to it.
    env["VENDOR_PAYMENT_URL"] = "http://127.0.0.1:9/payments"
    return env


def as_cron(*args) -> list[str]:
    """``manage.py`` with exactly ``args`` (the harness's ``manage_py`` adds ``-v 1``)."""
    return [sys.executable, str(BASE_DIR / "manage.py"), *args]


def cron(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        as_cron(*args), cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )


def old_denial() -> None:
    denial = AccessDenial.objects.create(
        reason=AccessDenial.Reason.TENANT, actor="mallory", resource="old"
    )
    AccessDenial.objects.filter(pk=denial.pk).update(at=timezone.now() - timedelta(days=400))


def old_fence_event() -> None:
    FenceEvent.objects.create(resource="batch:1", outcome="failed", token=1, actor="cron")
    FenceEvent.objects.update(at=timezone.now() - timedelta(days=400))


CRON_JOBS = [
    ("prune_fence_events",),
    ("prune_access_denials",),
    ("forget_reporters",),
    ("sla_sweep",),
    ("publish_notices",),
    ("record_insurance_lapses",),
    ("pay_approved_invoices", "--all-orgs"),
    ("generate_monthly_charges", "--org", "maple-court", "--month", MONTH_ARG),
]


@pytest.mark.parametrize("command", CRON_JOBS, ids=[job[0] for job in CRON_JOBS])
def test_a_cron_job_that_succeeds_prints_and_logs_nothing(maple, cron_env, command):
    old_denial()
    old_fence_event()

    result = cron(*command, env=cron_env)

    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@pytest.mark.parametrize(
    ("command", "line"),
    [
        (("prune_fence_events", "--days", "1"), "Deleted 1 fence event older than 1 day (before "),
        (("prune_access_denials",), "Deleted 1 access denial older than 90 days (before "),
        (("forget_reporters",), "Erased the contact of 0 reporters (closed before "),
        (("sla_sweep",), "SLA sweep: 0 complaints marked breached."),
        (
            ("pay_approved_invoices", "--all-orgs"),
            "0 invoices to pay: 0 paid, 0 already paid, 0 changed meanwhile, 0 failed.",
        ),
        (
            ("generate_monthly_charges", "--org", "maple-court", "--month", MONTH_ARG),
            "Generated 10 charges for Maple Court, March 2026",
        ),
    ],
    ids=lambda value: value[0] if isinstance(value, tuple) else "",
)
def test_v1_asks_for_the_summary_line_with_plurals_right(maple, cron_env, command, line):
    old_denial()
    old_fence_event()

    result = cron(*command, "-v", "1", env=cron_env)

    assert (result.returncode, result.stderr) == (0, "")
    [printed] = result.stdout.splitlines()
    assert printed.startswith(line), printed


def run_on_a_terminal(*args, env) -> tuple[int, str]:
    """Run ``manage.py`` with its stdout on a pseudo-terminal, as a person at a shell."""
    leader, follower = os.openpty()
    try:
        child = subprocess.Popen(
            as_cron(*args), cwd=BASE_DIR, env=env, stdout=follower, stderr=subprocess.PIPE
        )
        os.close(follower)
        follower = None
        child.wait(timeout=60)
        output = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(leader)
        if follower is not None:
            os.close(follower)
    return child.returncode, output.decode()


def test_the_log_level_is_warning_only_for_an_unattended_command(cron_env):
    show = (
        "shell",
        "--no-imports",
        "-c",
        "from django.conf import settings as s; print(s.LOG_LEVEL)",
    )

    piped = cron(*show, env=cron_env)
    chosen = cron(*show, env={**cron_env, "LOG_LEVEL": "info"})
    code, on_terminal = run_on_a_terminal(*show, env=cron_env)

    assert piped.stdout.strip() == "WARNING"
    assert chosen.stdout.strip() == "INFO"
    assert (code, on_terminal.strip()) == (0, "INFO")


def test_on_a_terminal_the_summary_is_printed_without_asking(maple, cron_env):
    old_denial()

    code, output = run_on_a_terminal("prune_access_denials", env=cron_env)

    assert code == 0
    assert output.strip().startswith("Deleted 1 access denial older than 90 days")


def test_help_says_the_verbosity_rule(cron_env):
    for command in ("prune_fence_events", "sla_sweep", "seed_demo"):
        text = " ".join(cron(command, "--help", env=cron_env).stdout.split())
        assert "0 when stdout is not a terminal (cron), unless -v is given" in text, command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--bogus",), "CommandError: unrecognized arguments: --bogus"),
        (("extra",), "CommandError: unrecognized arguments: extra"),
        (("-v", "9"), "CommandError: argument -v/--verbosity: invalid choice: 9"),
    ],
)
def test_seed_demo_rejects_a_bad_argument_in_one_line_with_exit_1(cron_env, args, message):
    result = cron("seed_demo", *args, env=cron_env)

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(message)


# -- the month start: already done, or done by another worker ----------------------------------


def test_a_month_done_before_the_run_is_already_done(maple, oak, cron_env):
    generate_monthly_charges(organization=maple, month=MONTH, actor=None, via="test")

    result = run_manage(
        "generate_monthly_charges", "--all-orgs", "--month", MONTH_ARG, "-v", "1", env=cron_env
    )

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "March 2026: 2 associations: 1 generated here, 1 already done, 0 by another worker, "
        "0 failed."
    ]


def test_a_month_another_worker_completes_during_the_run_is_by_another_worker(maple, oak, cron_env):
    lease = FenceLock().acquire(
        charge_resource(oak, MONTH), ttl=timedelta(seconds=60), holder="worker-2"
    )
    child = start_manage(
        "generate_monthly_charges", "--all-orgs", "--month", MONTH_ARG, "--wait", "50",
        "-v", "1", env=cron_env,
    )  # fmt: skip
    try:
        # Hold point: the run met the held lease and waits for its holder.
        wait_until(lambda: FenceEvent.objects.filter(outcome="busy").exists(), what="busy")
        # The holder (another worker) commits its run while this one waits.
        MonthlyChargeRun.objects.create(
            organization=oak,
            month=MONTH,
            status=MonthlyChargeRun.Status.COMPLETED,
            completed_at=timezone.now(),
            completed_by="worker-2",
        )
        stdout, stderr = child.communicate(timeout=60)
    finally:
        child.kill() if child.poll() is None else None
        lease.release()

    assert (child.returncode, stderr) == (0, "")
    assert stdout.splitlines() == [
        "March 2026: 2 associations: 1 generated here, 0 already done, 1 by another worker, "
        "0 failed."
    ]


def test_one_association_is_singular(maple, cron_env):
    result = run_manage(
        "generate_monthly_charges", "--all-orgs", "--month", MONTH_ARG, "-v", "1", env=cron_env
    )

    assert result.stdout.splitlines() == [
        "March 2026: 1 association: 1 generated here, 0 already done, 0 by another worker, "
        "0 failed."
    ]
