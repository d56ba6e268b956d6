"""The ``sla_sweep`` and ``publish_notices`` commands as cron runs them: child processes
against the test database, racing each other, waiting, killed mid-pass, misconfigured."""

import json
import os
import signal
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from hoa.jobs.scheduled import PUBLISH_NOTICES_LOCK, SLA_SWEEP_LOCK, sweep_sla
from hoa.models import Complaint, ComplaintEvent, Notice
from locking.advisory import advisory_key, advisory_lock
from tests.harness.net import closed_port
from tests.harness.processes import run_child, run_manage, start_manage
from tests.harness.waiting import wait_until
from tests.jobs_support import (
    advisory_lock_holders,
    backends_of,
    backends_waiting,
    make_due_notices,
    make_overdue,
    table_locked,
)

EVENT_INSERT = 'INSERT INTO "hoa_complaintevent"'
SKIP_MESSAGES = {
    "sla_sweep": "another sweep is running\n",
    "publish_notices": "another sweep is running (notice publisher)\n",
}
LOCK_NAMES = {"sla_sweep": SLA_SWEEP_LOCK, "publish_notices": PUBLISH_NOTICES_LOCK}

KEYS_SCRIPT = """
import json, django
django.setup()
from hoa.jobs.scheduled import PUBLISH_NOTICES_LOCK, SLA_SWEEP_LOCK
from locking import advisory_key
print(json.dumps({n: [hash(n), advisory_key(n)] for n in (SLA_SWEEP_LOCK, PUBLISH_NOTICES_LOCK)}))
"""


def child_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "hoa.settings", **extra}


def close_child(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.kill()
    child.communicate(timeout=10)


def test_advisory_lock_keys_are_stable_across_hash_seeds_and_distinct_per_job():
    seen = []
    for seed in ("1", "2"):
        done = run_child(
            [sys.executable, "-c", KEYS_SCRIPT], env=child_env(PYTHONHASHSEED=seed), check=True
        )
        seen.append(json.loads(done.stdout))
    first, second = seen

    for name in (SLA_SWEEP_LOCK, PUBLISH_NOTICES_LOCK):
        assert first[name][0] != second[name][0], "the hash seeds did not take effect"
        assert first[name][1] == second[name][1] == advisory_key(name)
    # Pinned: a change to the hashing would let old and new hosts run passes side by side.
    assert advisory_key(SLA_SWEEP_LOCK) == first[SLA_SWEEP_LOCK][1] == PINNED_KEYS[SLA_SWEEP_LOCK]
    assert advisory_key(PUBLISH_NOTICES_LOCK) == PINNED_KEYS[PUBLISH_NOTICES_LOCK]
    assert advisory_key(SLA_SWEEP_LOCK) != advisory_key(PUBLISH_NOTICES_LOCK)


PINNED_KEYS = {SLA_SWEEP_LOCK: 63359494463523174, PUBLISH_NOTICES_LOCK: -3073309785621929701}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", ["sla_sweep", "publish_notices"])
def test_command_skips_and_exits_0_when_another_host_holds_the_lock(command, maple, subprocess_env):
    make_overdue(maple, 2)
    make_due_notices(maple, 2)

    with transaction.atomic(), advisory_lock(LOCK_NAMES[command]) as acquired:
        assert acquired
        done = run_manage(command, env=subprocess_env)

    assert (done.returncode, done.stdout, done.stderr) == (0, SKIP_MESSAGES[command], "")
    assert Complaint.objects.breached().count() == 0
    assert Notice.objects.filter(published_at__isnull=False).count() == 0


@pytest.mark.django_db(transaction=True)
def test_wait_gives_up_after_the_given_seconds_and_exits_0(maple, subprocess_env):
    make_overdue(maple, 1)

    with transaction.atomic(), advisory_lock(SLA_SWEEP_LOCK):
        done = run_manage("sla_sweep", "--wait", "0.3", env=subprocess_env)

    assert (done.returncode, done.stdout) == (0, "another sweep is running\n")
    assert Complaint.objects.breached().count() == 0


@pytest.mark.django_db(transaction=True)
def test_wait_blocks_until_the_holder_finishes_then_runs_the_pass(maple, subprocess_env):
    make_overdue(maple, 2)
    env = {**subprocess_env, "PGAPPNAME": "sweep-waiting"}

    with transaction.atomic(), advisory_lock(SLA_SWEEP_LOCK):
        child = start_manage(
            "sla_sweep",
            "--wait",
            "60",
            env=env,
        )
        try:
            wait_until(lambda: backends_of("sweep-waiting"), what="the waiting sweep to connect")
            assert child.poll() is None
            assert Complaint.objects.breached().count() == 0
        except BaseException:
            close_child(child)
            raise
    stdout, stderr = child.communicate(timeout=60)

    assert (child.returncode, stdout) == (0, "SLA sweep: 2 complaints marked breached.\n")
    assert "Traceback" not in stderr


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_sweep_processes_with_different_hash_seeds_one_works_one_skips(maple, subprocess_env):
    complaints = make_overdue(maple, 3)

    # Hold point: the first sweep blocks on its first event INSERT, inside its pass.
    with table_locked("hoa_complaintevent"):
        first = start_manage(
            "sla_sweep",
            env={**subprocess_env, "PGAPPNAME": "sweep-first", "PYTHONHASHSEED": "1"},
        )
        try:
            wait_until(
                lambda: backends_waiting(EVENT_INSERT, application_name="sweep-first"),
                what="the first sweep inside its pass",
            )
            assert [app for _, app in advisory_lock_holders(SLA_SWEEP_LOCK)] == ["sweep-first"]
            second = run_manage("sla_sweep", env={**subprocess_env, "PYTHONHASHSEED": "2"})
            assert first.poll() is None
        except BaseException:
            close_child(first)
            raise
    stdout, stderr = first.communicate(timeout=60)

    assert (second.returncode, second.stdout, second.stderr) == (
        0,
        "another sweep is running\n",
        "",
    )
    assert (first.returncode, stdout) == (0, "SLA sweep: 3 complaints marked breached.\n")
    assert "Traceback" not in stderr
    assert sorted(ComplaintEvent.objects.values_list("complaint", flat=True)) == sorted(
        c.pk for c in complaints
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_sweep_killed_mid_pass_leaves_no_lock_and_the_next_sweep_proceeds_at_once(
    maple, subprocess_env
):
    complaints = make_overdue(maple, 5)
    stuck = complaints[2]

    with transaction.atomic():
        # Hold point: an uncommitted breach event for the third complaint makes the child's
        # INSERT for it wait, after its batches for the first two committed.
        ComplaintEvent.objects.create(complaint=stuck, kind=ComplaintEvent.Kind.SLA_BREACHED)
        child = start_manage(
            "sla_sweep",
            "--batch-size",
            "1",
            env={**subprocess_env, "PGAPPNAME": "sweep-to-kill"},
            text=False,
        )
        try:
            wait_until(
                lambda: backends_waiting(EVENT_INSERT, application_name="sweep-to-kill"),
                what="the child sweep blocked at its third batch",
            )
            assert [app for _, app in advisory_lock_holders(SLA_SWEEP_LOCK)] == ["sweep-to-kill"]
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=10) == -signal.SIGKILL
            # No cleanup code ran in the child: PostgreSQL itself ends the dead session's
            # transaction and so drops the lock.
            wait_until(
                lambda: advisory_lock_holders(SLA_SWEEP_LOCK) == [],
                what="PostgreSQL to drop the dead sweep's lock",
            )
        finally:
            close_child(child)
        transaction.set_rollback(True)
    wait_until(lambda: not backends_of("sweep-to-kill"), what="the dead child's sessions to end")
    killed_pass = set(Complaint.objects.breached().values_list("pk", flat=True))

    result = sweep_sla()

    assert killed_pass == {complaints[0].pk, complaints[1].pk}
    assert (result.acquired, result.breached) == (True, 3)
    assert sorted(ComplaintEvent.objects.values_list("complaint", flat=True)) == sorted(
        c.pk for c in complaints
    )


@pytest.mark.django_db
@pytest.mark.parametrize("command", ["sla_sweep", "publish_notices"])
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--wait", "soon", "--wait must be a number of seconds above 0 and at most 3600"),
        ("--wait", "-1", "--wait must be a number of seconds above 0 and at most 3600"),
        ("--wait", "0", "--wait must be a number of seconds above 0 and at most 3600"),
        ("--wait", "nan", "--wait must be a number of seconds above 0 and at most 3600"),
        ("--wait", "inf", "--wait must be a number of seconds above 0 and at most 3600"),
        ("--wait", "3601", "--wait must be a number of seconds above 0 and at most 3600"),
        ("--batch-size", "0", "--batch-size must be a whole number from 1 to 10000"),
        ("--batch-size", "2.5", "--batch-size must be a whole number from 1 to 10000"),
    ],
)
def test_bad_options_are_refused_and_nothing_is_written(command, option, value, message, maple):
    make_overdue(maple, 1)
    make_due_notices(maple, 1)

    with pytest.raises(CommandError) as refused:
        call_command(command, option, value)

    assert str(refused.value) == f"{message}, got {value!r}."
    assert Complaint.objects.breached().count() == 0
    assert Notice.objects.filter(published_at__isnull=False).count() == 0


def test_bad_wait_exits_1_with_one_line():
    done = run_manage("sla_sweep", "--wait", "soon", env=child_env())

    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "CommandError: --wait must be a number of seconds above 0 and at most 3600, got 'soon'."
    ]


@pytest.mark.parametrize("command", ["sla_sweep", "publish_notices"])
def test_unreachable_database_exits_1_with_one_line(command):
    port = closed_port()  # nothing listens on it

    done = run_manage(command, env=child_env(DATABASE_URL=f"postgres://hoa@127.0.0.1:{port}/hoa"))

    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"CommandError: PostgreSQL is unreachable (127.0.0.1:{port}): ")
