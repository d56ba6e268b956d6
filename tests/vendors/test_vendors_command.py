"""``manage.py assign_vendor``: exit 0 / 75 / 1 with one line, never a traceback."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from hoa.answers.refusals import Superseded
from hoa.answers.table import EXIT_TEMPFAIL
from hoa.models import Complaint, OutsideCall
from hoa.operations import operations
from locking.models import FenceEvent
from tests.harness.processes import run_manage, start_manage
from tests.harness.waiting import wait_until
from tests.vendors_support import (
    WAIT,
    active_assignments,
    active_vendor,
    cancellations,
    dispatch_of,
    start_overtaking_reassignment,
    state_of,
    vendor_with_contract,
)
from vendors.models import VendorAssignment
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def complaint(maple):
    return Complaint.objects.create(organization=maple, title="Broken gate")


@pytest.fixture
def env(subprocess_env, http_stub):
    return {**subprocess_env, "VENDOR_DISPATCH_URL": http_stub.url_for("dispatch")}


def manage(env, complaint_id, vendor_id, *extra):
    return run_manage(
        "assign_vendor",
        "--complaint",
        str(complaint_id),
        "--vendor",
        str(vendor_id),
        *extra,
        env=env,
    )


def call(*args: str) -> tuple[int, str]:
    """Run the command in this process: (exit status, its one line). Faster than a child
    process for the many input cases; the child-process tests prove the real exit codes."""
    out = StringIO()
    try:
        call_command("assign_vendor", *args, stdout=out, stderr=StringIO())
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, out.getvalue().strip()


def one_line(text: str) -> str:
    """The command's own message: the one line that is not a log record."""
    lines = [line for line in text.splitlines() if line and " INFO " not in line]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_assigns_and_prints_one_line(env, complaint, pipe, http_stub):
    done = manage(env, complaint.pk, pipe.pk)

    assert done.returncode == 0, done.stderr
    assert one_line(done.stdout) == f"Pipe Pros is assigned to complaint #{complaint.pk} (token 1)."
    [active] = active_assignments(complaint)
    assert (active.vendor, active.fence_token) == (pipe, 1)
    assert active.actor_label.startswith("cli:")
    assert [call.token for call in http_stub.received] == [1]


def test_repeat_is_already_done_and_another_vendor_needs_reassign(complaint, pipe, green):
    ids = ("--complaint", str(complaint.pk))
    assert call(*ids, "--vendor", str(pipe.pk))[0] == 0

    again = call(*ids, "--vendor", str(pipe.pk))
    other = call(*ids, "--vendor", str(green.pk))
    replaced = call(*ids, "--vendor", str(green.pk), "--reassign")

    assert again == (0, f"Pipe Pros is already the vendor of complaint #{complaint.pk}.")
    assert other[0] == 1  # trying again cannot change it: only --reassign can
    assert other[1].startswith(
        f"Complaint #{complaint.pk} already has a vendor: Pipe Pros, assigned by cli:"
    )
    assert replaced[0] == 0
    assert replaced[1].startswith(f"Evergreen now handles complaint #{complaint.pk}, replacing")
    assert [a.vendor for a in active_assignments(complaint)] == [green]
    assert VendorAssignment.objects.count() == 2


def test_a_rival_paused_in_its_dispatch_is_refused_once_the_command_claimed_and_it_wins(
    env, maple, complaint, pipe, green, alice, dispatch, redis_client, settings
):
    """The command reads the vendor to replace (Pipe Pros) before its lease. A rival,
    paused in its dispatch past its lease, comes back after the command claimed and called
    Bright Spark: the rival's commit is refused (it used to commit Evergreen, and the
    command was told in vain), Evergreen, whom it told, gets the cancellation, and the
    command replaces Pipe Pros, as it decided."""
    settings.VENDOR_LOCK_TTL_SECONDS = 0.3  # the rival's lease, in this process
    bright = active_vendor("Bright Spark", maple)
    shown = assign_vendor(complaint=complaint, vendor=pipe, actor=alice).assignment
    rival, rival_gate = start_overtaking_reassignment(
        dispatch, redis_client, complaint=complaint, vendor=green, replacing=shown, actor=alice
    )
    command_gate = dispatch.hold(dispatch_of(bright))
    command = start_manage(
        "assign_vendor", "--complaint", complaint.pk, "--vendor", bright.pk, "--reassign", env=env
    )
    try:
        command_gate.wait_arrived(1, timeout=WAIT * 2)  # it claimed token 3 and called
        rival_gate.release()
        lost = rival.outcome()  # the older holder comes back first: refused
        command_gate.release()
        stdout, stderr = command.communicate(timeout=WAIT)
    finally:
        command_gate.release()
        if command.poll() is None:
            command.kill()
            command.wait()

    assert isinstance(lost, Superseded)
    assert (lost.token, lost.recorded) == (2, 3)
    assert command.returncode == 0, stderr
    assert one_line(stdout).startswith(
        f"Bright Spark now handles complaint #{complaint.pk}, replacing"
    )
    assert [(a.vendor, a.fence_token) for a in active_assignments(complaint)] == [(bright, 3)]
    assert VendorAssignment.objects.count() == 2  # Pipe Pros, replaced; Bright Spark
    assert Complaint.objects.get(pk=complaint.pk).last_fence_token == 3
    assert FenceEvent.objects.get(outcome="stale").token == 2
    # Evergreen heard of the overtaken attempt: it is taken back, whatever refused it.
    [cancel] = cancellations(dispatch)
    assert (cancel.json["vendor"]["id"], cancel.token) == (green.pk, 2)
    assert (lost.told_in_vain, lost.cancellation) == (green, "cancellation sent (HTTP 200)")


def test_busy_lease_exits_75_naming_the_holder(env, complaint, pipe, fence_lock, redis_client):
    held = fence_lock.acquire(
        assignment_resource(complaint.pk), ttl=timedelta(seconds=30), holder="bob"
    )
    before = state_of(complaint, redis_client)

    busy = manage(env, complaint.pk, pipe.pk)

    assert busy.returncode == 75
    line = one_line(busy.stderr)
    assert "Another holder (bob on " in line
    assert f") is assigning a vendor to complaint #{complaint.pk}; try again in " in line
    assert state_of(complaint, redis_client) == before
    held.release()


def test_actor_is_checked_like_the_web(complaint, pipe, alice, viewer, mallory):
    ids = ("--complaint", str(complaint.pk), "--vendor", str(pipe.pk))

    not_allowed = (1, "viewer may not assign vendors for Maple Court.")
    assert call(*ids, "--actor", "viewer") == not_allowed
    not_theirs = (1, f"No complaint with id {complaint.pk} for mallory.")
    assert call(*ids, "--actor", "mallory") == not_theirs
    assert call(*ids, "--actor", "ghost") == (1, 'No active user "ghost".')
    assert VendorAssignment.objects.count() == 0
    assert call(*ids, "--actor", "alice")[0] == 0
    assert VendorAssignment.objects.get().actor_label.startswith("alice via cli:")


def test_dispatch_failure_exits_1_and_writes_nothing(env, complaint, pipe, http_stub, redis_client):
    http_stub.status = 422
    before = state_of(complaint, redis_client)

    failed = manage(env, complaint.pk, pipe.pk)

    assert failed.returncode == 1
    assert (
        f"Assigning a vendor to complaint #{complaint.pk} failed: the dispatch service did not "
        "accept it (HTTP 422); nothing was saved."
    ) in one_line(failed.stderr)
    after = state_of(complaint, redis_client)
    assert (after.assignments, after.fence_token) == (before.assignments, before.fence_token)


@pytest.mark.parametrize(
    ("complaint_arg", "vendor_arg", "message"),
    [
        ("abc", "{vendor}", "--complaint must be a positive whole number, got 'abc'."),
        ("-1", "{vendor}", "--complaint must be a positive whole number, got '-1'."),
        ("0", "{vendor}", "--complaint must be a positive whole number, got '0'."),
        ("{complaint}", "1.5", "--vendor must be a positive whole number, got '1.5'."),
        ("{complaint}", "99999999999999999999", "--vendor must be a positive whole number"),
        ("{complaint}", "", "--vendor must be a positive whole number, got ''."),
        ("987654", "{vendor}", "No complaint with id 987654."),
        ("{complaint}", "987654", "No vendor with id 987654."),
        ("{complaint}", "{ended}", "Bright Spark's contract with Maple Court ended on "),
        ("{complaint}", "{future}", "Summit's contract with Maple Court starts on "),
        ("{complaint}", "{oak_vendor}", "Oakline has no contract with Maple Court."),
    ],
    ids=[
        "letters",
        "negative",
        "zero",
        "decimal",
        "beyond-bigint",
        "empty",
        "unknown-complaint",
        "unknown-vendor",
        "ended-contract",
        "future-contract",
        "other-tenant-vendor",
    ],
)
def test_bad_input_exits_1_with_one_line_and_writes_nothing(
    complaint,
    pipe,
    maple,
    oak,
    redis_client,
    http_stub,
    settings,
    complaint_arg,
    vendor_arg,
    message,
):
    settings.VENDOR_DISPATCH_URL = http_stub.url_for("dispatch")
    ids = {
        "complaint": complaint.pk,
        "vendor": pipe.pk,
        "ended": vendor_with_contract(
            "Bright Spark", maple, starts_in_days=-90, ends_in_days=-1
        ).pk,
        "future": vendor_with_contract("Summit", maple, starts_in_days=1, ends_in_days=90).pk,
        "oak_vendor": active_vendor("Oakline", oak).pk,
    }
    before = state_of(complaint, redis_client)

    code, line = call(
        "--complaint", complaint_arg.format(**ids), "--vendor", vendor_arg.format(**ids)
    )

    assert code == 1
    assert line.startswith(message)
    assert "\n" not in line
    assert state_of(complaint, redis_client) == before
    assert before.redis_keys == ()
    assert http_stub.received == []


def test_bad_input_in_a_child_process_exits_1_without_a_traceback(env, complaint, maple):
    ended = vendor_with_contract("Bright Spark", maple, starts_in_days=-90, ends_in_days=-1)

    malformed = manage(env, "abc", ended.pk)
    inactive = manage(env, complaint.pk, ended.pk)

    assert malformed.returncode == 1
    assert one_line(malformed.stderr) == (
        "CommandError: --complaint must be a positive whole number, got 'abc'."
    )
    assert inactive.returncode == 1
    assert one_line(inactive.stderr).startswith(
        "CommandError: Bright Spark's contract with Maple Court ended on "
    )
    assert malformed.stdout == inactive.stdout == ""
    assert VendorAssignment.objects.count() == 0


def test_missing_options_exit_1():
    assert call("--vendor", "1") == (1, "--complaint ID is required.")


def test_complaint_of_another_association_with_an_actor_of_this_one_is_refused(
    oak, pipe, alice, redis_client
):
    oak_complaint = Complaint.objects.create(organization=oak, title="Oak leak")
    before = state_of(oak_complaint, redis_client)

    refused = call(
        "--complaint", str(oak_complaint.pk), "--vendor", str(pipe.pk), "--actor", "alice"
    )

    assert refused == (1, f"No complaint with id {oak_complaint.pk} for alice.")
    assert state_of(oak_complaint, redis_client) == before


@pytest.mark.slow
def test_eight_processes_racing_exactly_one_assigns_the_rest_exit_75(
    env, maple, complaint, http_stub
):
    vendors = [active_vendor(f"Vendor {number}", maple) for number in range(8)]
    # The winner holds its lease inside the dispatch call until all seven losers, starting
    # Django one after another on a busy machine, have answered: give both room.
    # Every operation's lease outlives the timeout: the check of the two (hoa.W001) stays quiet.
    leases = {operation.ttl_setting: "240" for operation in operations() if operation.ttl_setting}
    env = {**env, "EXTERNAL_CALL_TIMEOUT_SECONDS": "120", **leases}
    gate = http_stub.hold()  # the winner waits inside its dispatch until every loser answered
    processes = [
        start_manage("assign_vendor", "--complaint", complaint.pk, "--vendor", vendor.pk, env=env)
        for vendor in vendors
    ]
    try:
        gate.wait_arrived(1, timeout=WAIT * 2)
        # Seven answers must come while the winner still holds the lease inside its call.
        wait_until(lambda: sum(p.poll() is not None for p in processes) == 7, what="seven answers")
        assert gate.arrived == 1
        gate.release()
        outputs = [p.communicate(timeout=WAIT) for p in processes]
    finally:
        gate.release()
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()

    codes = [p.returncode for p in processes]
    assert sorted(codes) == [0] + [75] * 7
    winner = processes[codes.index(0)]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        if process is not winner:
            assert f"pid {winner.pid}" in one_line(stderr)  # the loser names the holder
    [active] = active_assignments(complaint)
    assert active.vendor == vendors[codes.index(0)]
    assert VendorAssignment.objects.count() == 1
    assert len(http_stub.received) == 1


def test_service_and_command_share_the_fence(complaint, pipe, green, alice):
    # A web assignment (token 1) then a command reassignment: tokens keep increasing.
    assign_vendor(complaint=complaint, vendor=pipe, actor=alice)

    done = call("--complaint", str(complaint.pk), "--vendor", str(green.pk), "--reassign")

    assert done[0] == 0
    assert [a.fence_token for a in VendorAssignment.objects.order_by("fence_token")] == [1, 2]


def test_a_dispatch_whose_answer_is_lost_exits_75_saying_not_known_yet(
    env, complaint, pipe, http_stub
):
    """Not "nothing was written", exit 1: the vendor may have been dispatched. Exit 75 (the
    same command again settles it, by the same key), one line, the attempt recorded."""
    http_stub.lose_answer = lambda request: "redirect"
    unknown = manage(env, complaint.pk, pipe.pk)

    assert unknown.returncode == EXIT_TEMPFAIL, unknown.stderr
    assert one_line(unknown.stderr).startswith(
        "CommandError: The dispatch service did not say whether it acted (HTTP 302: "
        "redirected, not followed): not known yet."
    )
    assert http_stub.gets == []
    assert OutsideCall.objects.filter(settled_at__isnull=True).count() == 1

    http_stub.lose_answer = None
    again = manage(env, complaint.pk, pipe.pk)
    assert again.returncode == 0, again.stderr
    assert [a.vendor for a in active_assignments(complaint)] == [pipe]
