"""Both fenced operations across a Redis data loss, as cron and operators run them.

A command is paused inside its external call (held at the stand-in's gate) with a token
granted before Redis loses its data. A newer command runs after the loss: its first grant
already outranks every earlier one (no doomed call with a low token), it commits, and the
paused command, once its call returns, is refused: exit 75, nothing doubled.

The grants before the loss are never written (``paused_holder``, locking's pytest plugin:
granted, their leases run out, their holders never wake), so the database cannot know their
numbers; reseeding the counter to the recorded token (the old design) would hand them out
again and let the paused command win. Here the business checks cannot save it either: each
scenario is built so that only the fence refuses the paused command.
"""

import subprocess

import pytest

from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.operations import charge_resource
from hoa.management.base import EXIT_TEMPFAIL
from hoa.models import Complaint
from locking.epochs import first_token
from tests.charges_support import MONTH, MONTH_ARG
from tests.harness.processes import start_manage
from tests.vendors_support import active_assignments, active_vendor, cancellations, dispatches
from vendors.models import VendorAssignment
from vendors.operations import assignment_resource
from vendors.services import assign_vendor

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WAIT = 60


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    try:
        stdout, stderr = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, stdout, stderr


@pytest.fixture
def env(subprocess_env, http_stub):
    return {
        **subprocess_env,
        "VENDOR_DISPATCH_URL": http_stub.url_for("dispatch"),
        "BILLING_WEBHOOK_URL": http_stub.url_for("billing"),
        "LOG_LEVEL": "ERROR",
    }


@pytest.mark.private_redis  # FLUSHALL
def test_reassignment_paused_in_its_dispatch_across_a_redis_loss_exits_75(
    env, maple, alice, http_stub, redis_client, settings, paused_holder
):
    settings.VENDOR_DISPATCH_URL = http_stub.url_for("dispatch")
    complaint = Complaint.objects.create(organization=maple, title="Broken gate")
    pipe, green, paused_vendor, newer_vendor = (
        active_vendor(name, maple) for name in ("Pipe", "Green", "Paused", "Newer")
    )
    resource = assignment_resource(complaint.pk)
    first = assign_vendor(complaint=complaint, vendor=pipe, actor=alice)  # token 1
    assign_vendor(  # token 2
        complaint=complaint,
        vendor=green,
        actor=alice,
        reassign=True,
        replacing=first.assignment,
    )
    assert paused_holder(resource).token == 3

    gate = http_stub.hold(lambda request: request.token == 4, answered=True)
    paused = start_manage(
        "assign_vendor",
        *("--complaint", str(complaint.pk), "--vendor", str(paused_vendor.pk), "--reassign"),
        env=env,
    )
    try:
        gate.wait_arrived(1, timeout=WAIT)  # token 4, inside its dispatch call
        redis_client.flushall()  # Redis loses its data: counter, lease and all

        newer = start_manage(
            "assign_vendor",
            *("--complaint", str(complaint.pk), "--vendor", str(newer_vendor.pk), "--reassign"),
            env=env,
        )
        newer_code, _, newer_err = finish(newer)
    finally:
        gate.release()
    paused_code, paused_out, paused_err = finish(paused)

    assert (newer_code, newer_err) == (0, "")
    assert (paused_code, paused_out) == (EXIT_TEMPFAIL, "")
    assert "took over" in paused_err and "Traceback" not in paused_err
    [active] = active_assignments(complaint)
    assert (active.vendor, active.fence_token) == (newer_vendor, first_token(1) + 1)
    assert VendorAssignment.objects.filter(complaint=complaint).count() == 3
    assert not VendorAssignment.objects.filter(vendor=paused_vendor).exists()
    # The first attempt after the loss sent no call with a doomed low token.
    tokens = [request.token for request in dispatches(http_stub)]
    assert sorted(tokens) == [1, 2, 4, first_token(1) + 1]
    # The paused attempt told its vendor, then was overtaken: it takes its dispatch back.
    [cancel] = cancellations(http_stub)
    assert (cancel.json["vendor"]["id"], cancel.token) == (paused_vendor.pk, 4)


@pytest.mark.private_redis  # FLUSHALL
def test_charge_run_paused_in_its_billing_call_across_a_redis_loss_exits_75(
    env, maple, http_stub, redis_client, paused_holder
):
    resource = charge_resource(maple, MONTH)
    assert [paused_holder(resource).token, paused_holder(resource).token] == [1, 2]
    gate = http_stub.hold(lambda request: request.token == 3, answered=True)
    args = ("--org", "maple-court", "--month", MONTH_ARG)
    paused = start_manage("generate_monthly_charges", *args, env=env)
    try:
        gate.wait_arrived(1, timeout=WAIT)  # token 3, inside its billing call
        redis_client.flushall()
        newer_code, _, newer_err = finish(start_manage("generate_monthly_charges", *args, env=env))
    finally:
        gate.release()
    paused_code, paused_out, paused_err = finish(paused)

    assert (newer_code, newer_err) == (0, "")
    # Fence first: the paused holder learns it lost its lease, not that the work is done.
    assert (paused_code, paused_out) == (EXIT_TEMPFAIL, "")
    assert "A newer holder" in paused_err and "Traceback" not in paused_err
    run = MonthlyChargeRun.objects.get(organization=maple, month=MONTH)
    assert (run.last_fence_token, run.charge_count) == (first_token(1) + 1, 10)
    assert MonthlyCharge.objects.filter(run=run).count() == 10
    assert sorted(request.token for request in http_stub.received) == [3, first_token(1) + 1]
