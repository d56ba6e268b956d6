"""A fast subset of the fault-injection suite (``make faults``), run by ``make test``.

One case each of scenarios 1-4, driven by the suite's own code against real processes:
two gunicorn instances of two workers on this test database, a private redis-server
behind the suite's TCP proxy, the stand-in endpoint, and management commands as
subprocesses. Each scenario forces its interleaving (SIGSTOP, SIGKILL, a held external
call, Redis killed), then the history checker compares what every client was told with
the database.

The second half proves the checker can fail: it is fed histories that contradict the
database and must name the contradiction.
"""

import json
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.utils import timezone

from charges.models import MonthlyCharge, MonthlyChargeRun
from locking.models import ReceivedCall
from tests.faults.checker import check_history
from tests.faults.clients import Op
from tests.faults.scenario import find, run_scenario, warm_up
from tests.faults.seed import World, seed_world
from tests.faults.stack import Stack, StackOptions
from tests.harness.http import Received
from tests.harness.processes import django_database_url
from vendors.models import Invoice, VendorAssignment, VendorPayment

# One worker runs the module: its module-scoped stack (two gunicorn instances) starts
# once, not once per worker.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.xdist_group("faults-subset"),
]


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker):
    """The app under gunicorn on the test database; stopped before the database is dropped."""
    system = Stack(StackOptions(secret_key=settings.SECRET_KEY, database_url=django_database_url()))
    try:
        system.start_services().start_apps()
        with django_db_blocker.unblock():
            warm_up(system, seed_world(users=4), rounds=2)
        yield system
    finally:
        system.stop()


@pytest.fixture
def world() -> World:
    return seed_world(users=8)


def run(stack: Stack, world: World, key: str):
    spec, function = find(key)
    result = run_scenario(stack, world, spec, function)
    assert result.violations == []
    assert result.surprises == []
    return result


# -- one case of each of scenarios 1-4 ---------------------------------------------------------


def test_worker_frozen_inside_its_external_call_is_refused_after_takeover(stack, world):
    result = run(stack, world, "1b-assign")
    (paused,) = [op for op in result.ops if op.via == "http:a"]
    (rival,) = [op for op in result.ops if op.via == "http:b"]
    assert (paused.via, paused.status, paused.verdict) == ("http:a", 409, "refused")
    assert (rival.via, rival.status, rival.verdict) == ("http:b", 303, "done")
    complaint = paused.complaint
    assert list(
        VendorAssignment.objects.filter(complaint_id=complaint).values_list(
            "vendor_id", "fence_token", "active"
        )
    ) == [(rival.vendor, 2, True)]
    assert result.facts["external calls"] == [1, 2]
    # The paused worker told its vendor and was overtaken: it takes that dispatch back.
    assert result.facts["cancellations"] == [1]


def test_an_older_holder_back_first_is_refused_and_the_newer_ones_run_stands(stack, world):
    result = run(stack, world, "2-charges")
    older, newer = result.ops
    assert (older.via, older.status, older.verdict) == ("command", 75, "refused")
    assert (newer.status, newer.verdict) == (303, "done")
    run_row = MonthlyChargeRun.objects.get(month=f"{older.month}-01")
    assert run_row.is_completed
    assert run_row.completed_by.startswith(newer.user)
    assert run_row.last_fence_token == 2
    assert MonthlyCharge.objects.filter(run=run_row).count() == world.units("faults-maple")


def test_worker_killed_inside_its_transaction_leaves_nothing_and_the_next_holder_finishes(
    stack, world
):
    result = run(stack, world, "3a-charges")
    killed, retry = result.ops
    assert killed.verdict == "no_answer"
    # The run row is created in the fenced transaction too: the kill rolled it back with it.
    assert result.facts["after the kill"] == {"run": None, "charges": 0, "fence": None}
    assert (retry.status, retry.verdict) == (303, "done")
    assert result.facts["after the retry"]["charges"] == world.units("faults-maple")


def test_redis_down_at_acquire_answers_503_and_exit_1_and_writes_nothing(stack, world):
    result = run(stack, world, "4a-redis-down-acquire")
    down, retried = result.ops[:3], result.ops[3:]
    assert [(op.via, op.status) for op in down] == [
        ("http:a", 503),
        ("http:b", 503),
        ("command", 1),
    ]
    assert all(op.verdict == "unavailable" for op in down)
    assert [op.verdict for op in retried] == ["done", "done", "done"]


# -- the checker catches contradictions ------------------------------------------------------


def _op(world: World, **fields) -> Op:
    now = time.time()
    fields.setdefault("org", "faults-maple")
    fields.setdefault("org_id", world.org_id("faults-maple"))
    return Op(started=now - 1, ended=now + 1, **fields)


def _complete_run(world: World, month: str, *, by: str, charges: int | None = None):
    run_row = MonthlyChargeRun.objects.create(
        organization_id=world.org_id("faults-maple"),
        month=f"{month}-01",
        status=MonthlyChargeRun.Status.COMPLETED,
        completed_at=timezone.now(),
        completed_by=by,
        charge_count=world.units("faults-maple"),
        total=Decimal("0.00"),
        last_fence_token=1,
    )
    units = run_row.organization.units.order_by("pk")
    for unit in units[: charges if charges is not None else units.count()]:
        MonthlyCharge.objects.create(run=run_row, unit=unit, amount=Decimal("0.00"))
    return run_row


def _units(world: World) -> dict[int, int]:
    return {world.org_id(slug): world.units(slug) for slug in world.organizations}


def test_checker_flags_a_write_by_a_client_that_was_told_refused(world):
    month = world.take_month("faults-maple")
    _complete_run(world, month, by="faults-01")
    told = [_op(world, kind="charges", month=month, user="faults-01", verdict="refused")]
    problems = check_history(told, received=[], units=_units(world))
    assert problems == [
        f"monthly-charges:org:{world.org_id('faults-maple')}:{month}: faults-01 was told "
        "refused, yet its write is in the database"
    ]


def test_checker_flags_two_clients_told_they_generated_the_same_run(world):
    month = world.take_month("faults-maple")
    _complete_run(world, month, by="faults-01")
    told = [
        _op(world, kind="charges", month=month, user="faults-01", verdict="done"),
        _op(world, kind="charges", month=month, user="faults-02", verdict="done"),
    ]
    problems = check_history(told, received=[], units=_units(world))
    assert any("more than one client was told it generated the run" in p for p in problems)
    assert any("faults-02 was told it generated the run; faults-01 did" in p for p in problems)


def test_checker_flags_a_half_written_run_and_a_success_that_is_not_in_the_database(world):
    month = world.take_month("faults-maple")
    run_row = _complete_run(world, month, by="faults-01", charges=2)
    other = world.take_month("faults-maple")
    told = [
        _op(world, kind="charges", month=month, user="faults-01", verdict="done"),
        _op(world, kind="charges", month=other, user="faults-03", verdict="done"),
    ]
    problems = check_history(told, received=[], units=_units(world))
    units = world.units("faults-maple")
    expected = f"completed run has 2 charges for 2 units, expected one for each of {units}"
    assert any(expected in p for p in problems)
    assert any("faults-03 was told done but the run is not completed" in p for p in problems)
    assert run_row.charges.count() == 2


def _billing_call(key: str, token: int, status: int, verdict: str) -> Received:
    headers = {"Idempotency-Key": key, "X-Fencing-Token": str(token)}
    return Received("/billing", headers, b"", status=status, verdict=verdict)


def _billing_record(key: str, token: int, *, charges: int, total: str) -> ReceivedCall:
    body = json.dumps({"charge_count": charges, "total": total, "fencing_token": token})
    now = timezone.now()
    return ReceivedCall.objects.create(
        scope="billing",
        idempotency_key=key,
        token=token,
        content_digest="0" * 64,
        body=body.encode(),
        first_received_at=now,
        received_at=now,
    )


def test_checker_flags_a_billing_record_that_lost_the_higher_token_or_bills_another_run(world):
    month = world.take_month("faults-maple")
    _complete_run(world, month, by="faults-01")
    key = f"monthly-charges:{world.org_id('faults-maple')}:{month}"
    # The receiver accepted 1, then 2, but its record kept 1 (a lower token won), and it
    # refused 3 as stale though it never accepted anything higher.
    _billing_record(key, 1, charges=world.units("faults-maple") - 1, total="0.00")
    calls = [
        _billing_call(key, 1, 200, "accepted"),
        _billing_call(key, 2, 200, "replaced"),
        _billing_call(key, 3, 409, "stale"),
    ]
    told = [_op(world, kind="charges", month=month, user="faults-01", verdict="done")]

    problems = check_history(told, received=calls, units=_units(world))

    units = world.units("faults-maple")
    assert problems == [
        f"{key}: the stand-in accepted tokens [1, 2] at billing but its record holds 1: a "
        "lower token replaced a higher one",
        f"{key}: the stand-in refused tokens [3] as stale at billing, though nothing higher "
        "was accepted (highest 1)",
        f"monthly-charges:org:{world.org_id('faults-maple')}:{month}: the billing record "
        f"(token 1) bills {units - 1} charges, 0.00; the run has {units}, 0.00",
    ]


def test_checker_flags_a_completed_run_without_its_billing_record(world):
    month = world.take_month("faults-maple")
    _complete_run(world, month, by="faults-01")
    key = f"monthly-charges:{world.org_id('faults-maple')}:{month}"
    told = [_op(world, kind="charges", month=month, user="faults-01", verdict="done")]

    problems = check_history(
        told, received=[_billing_call(key, 1, 200, "accepted")], units=_units(world)
    )

    assert (
        f"monthly-charges:org:{world.org_id('faults-maple')}:{month}: 0 billing records for "
        "a completed run (expected one)"
    ) in problems


def test_checker_flags_assignments_out_of_token_order_and_a_lost_success(world, django_user_model):
    complaint = world.take_complaint("faults-maple")
    user = django_user_model.objects.get(username="faults-01")
    now = timezone.now()
    VendorAssignment.objects.create(
        complaint_id=complaint,
        vendor_id=world.vendors[0],
        fence_token=5,
        active=False,
        deactivated_at=now,
        assigned_at=now,
        assigned_by=user,
    )
    VendorAssignment.objects.create(
        complaint_id=complaint,
        vendor_id=world.vendors[1],
        fence_token=4,
        assigned_at=now + timedelta(milliseconds=1),
        assigned_by=user,
    )
    told = [
        _op(
            world,
            kind="assign",
            complaint=complaint,
            vendor=world.vendors[0],
            user="faults-01",
            verdict="done",
        ),
        _op(
            world,
            kind="assign",
            complaint=complaint,
            vendor=world.vendors[2],
            user="faults-02",
            verdict="done",
        ),
    ]
    problems = check_history(told, received=[], units=_units(world))
    resource = f"vendor-assignment:complaint:{complaint}"
    assert f"{resource}: assignment tokens are not increasing in commit order: [5, 4]" in problems
    assert f"{resource}: complaint fence 0 is below assignment token 5" in problems
    assert any(
        f"faults-02 was told vendor {world.vendors[2]} is assigned; no row of it" in p
        for p in problems
    )


def test_checker_gives_a_reassignment_row_to_the_reassign_request_not_an_open_unknown(
    world, django_user_model
):
    # faults-01 asked for vendor B plainly (its answer unknown: its window stays open),
    # then asked to reassign to B (a success whose message was not read). The row that
    # replaced A's is the reassignment's; blaming the plain request would be a false alarm.
    from hoa.models import Complaint

    complaint = world.take_complaint("faults-maple")
    Complaint.objects.filter(pk=complaint).update(last_fence_token=2)
    first, second = (
        django_user_model.objects.get(username=name) for name in ("faults-02", "faults-01")
    )
    now = timezone.now()
    VendorAssignment.objects.create(
        complaint_id=complaint,
        vendor_id=world.vendors[0],
        fence_token=1,
        active=False,
        deactivated_at=now,
        assigned_at=now - timedelta(milliseconds=5),
        assigned_by=first,
    )
    VendorAssignment.objects.create(
        complaint_id=complaint,
        vendor_id=world.vendors[1],
        fence_token=2,
        assigned_at=now,
        assigned_by=second,
    )
    plain = _op(
        world,
        kind="assign",
        complaint=complaint,
        vendor=world.vendors[1],
        user="faults-01",
        verdict="indeterminate",
    )
    reassign = _op(
        world,
        kind="assign",
        complaint=complaint,
        vendor=world.vendors[1],
        user="faults-01",
        verdict="succeeded",
        reassign=True,
    )
    original = _op(
        world,
        kind="assign",
        complaint=complaint,
        vendor=world.vendors[0],
        user="faults-02",
        verdict="done",
    )
    assert check_history([original, plain, reassign], received=[], units=_units(world)) == []
    # Without the reassign request, the plain one is all there is: that is a violation.
    problems = check_history([original, plain], received=[], units=_units(world))
    assert problems == [
        f"vendor-assignment:complaint:{complaint}: assignment "
        f"{VendorAssignment.objects.get(complaint_id=complaint, active=True).pk} replaced "
        "another without a reassign request"
    ]


# -- the checker of payments: money leaves once --------------------------------------------------


def _payment_call(invoice: int, token: int, status: int, verdict: str) -> Received:
    headers = {
        "Idempotency-Key": f"vendor-payment:invoice:{invoice}",
        "X-Fencing-Token": str(token),
    }
    return Received("/payment", headers, b"", status=status, verdict=verdict)


def _payment_record(invoice: int, token: int) -> ReceivedCall:
    """The stand-in's record of the invoice's key: the highest token it accepted."""
    now = timezone.now()
    return ReceivedCall.objects.create(
        scope="payment",
        idempotency_key=f"vendor-payment:invoice:{invoice}",
        token=token,
        content_digest="0" * 64,
        body=b"{}",
        first_received_at=now,
        received_at=now,
    )


def _pay_op(world: World, invoice: int, **fields) -> Op:
    return _op(world, kind="pay", invoice=invoice, **fields)


def test_checker_accepts_a_payment_made_once_and_answered_again(world):
    invoice = world.approved_invoice("faults-maple")
    Invoice.objects.filter(pk=invoice).update(status="paid", payment_claim=2)
    VendorPayment.objects.create(
        invoice_id=invoice, amount=1, currency="USD", reference="R", fence_token=2,
        actor_label="faults-02",
    )  # fmt: skip
    _payment_record(invoice, 2)
    calls = [_payment_call(invoice, 1, 200, "accepted"), _payment_call(invoice, 2, 200, "replaced")]
    told = [
        _pay_op(world, invoice, user="faults-01", verdict="refused"),  # paused, superseded
        _pay_op(world, invoice, user="faults-02", verdict="done"),
        _pay_op(world, invoice, user="faults-03", verdict="already_done"),
    ]
    assert check_history(told, received=calls, units=_units(world)) == []


def test_checker_flags_money_leaving_twice_and_a_void_invoice_paid(world):
    twice = world.approved_invoice("faults-maple")
    Invoice.objects.filter(pk=twice).update(status="paid", payment_claim=2)
    VendorPayment.objects.create(
        invoice_id=twice, amount=1, currency="USD", reference="R", fence_token=2,
        actor_label="faults-02",
    )  # fmt: skip
    voided = world.approved_invoice("faults-maple")
    Invoice.objects.filter(pk=voided).update(status="void")
    _payment_record(twice, 2)
    _payment_record(voided, 3)
    calls = [
        _payment_call(twice, 1, 200, "accepted"),
        _payment_call(twice, 2, 200, "accepted"),  # paid again: the replacement was not told
        _payment_call(voided, 3, 200, "accepted"),
    ]
    told = [
        _pay_op(world, twice, user="faults-02", verdict="done"),
        _pay_op(world, voided, user="faults-04", verdict="done"),
        _op(world, kind="void", invoice=voided, user="faults-05", verdict="done"),
    ]

    problems = check_history(told, received=calls, units=_units(world))

    assert problems == [
        f"vendor-payment:invoice:{twice}: the payment service paid 2 times",
        f"vendor-payment:invoice:{voided}: a void invoice was sent for payment",
        f"vendor-payment:invoice:{voided}: faults-04 was told done but nothing is paid",
    ]
