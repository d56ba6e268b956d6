"""The fenced charge generation service against real PostgreSQL, Redis and HTTP.

The races force their interleaving: the billing stand-in holds a chosen holder's request
(``http_stub.hold``) until the test releases it, short TTLs let leases run out while it
waits, and a table lock taken from another connection pauses a holder between its fence
UPDATE and its COMMIT.
"""

import threading
from collections import Counter
from datetime import date, datetime, timedelta
from decimal import Decimal

import psycopg
import pytest
from django.db import connection

from charges.exceptions import InvalidMonth
from charges.forms import parse_month
from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.operations import charge_resource
from charges.selectors import monthly_totals
from charges.services import generate_monthly_charges
from hoa.answers.refusals import (
    Busy,
    CallFailed,
    LockServiceDown,
    NotPermitted,
    OutcomeUnknown,
    Superseded,
)
from hoa.jobs.settling import settle_outside_calls
from hoa.models import Organization, OutsideCall, Unit
from locking import FenceLock, Outcome
from locking.epochs import first_token
from locking.keys import fence_key
from locking.models import FenceEvent, ReceivedCall
from tests.charges_support import (
    MONTH,
    Worker,
    dead_redis_url,
    wait_for_lease_expiry,
    waiting_statements,
)
from tests.harness.net import free_port
from tests.harness.waiting import wait_until

# The service refuses to run inside a transaction: its tests use real commits.
fenced = pytest.mark.django_db(transaction=True)

LONG_TTL = timedelta(seconds=30)
MAPLE_TOTAL = sum(Decimal("200.00") + n for n in range(1, 11))  # the maple fixture's units


@pytest.fixture
def short_ttl(settings):
    settings.CHARGES_LOCK_TTL_SECONDS = 0.3


def generate(organization, actor="cron-a", month=MONTH):
    """A string ``actor`` is a system caller: no user, recorded by its ``via``."""
    if isinstance(actor, str):
        return generate_monthly_charges(
            organization=organization, month=month, actor=None, via=actor
        )
    return generate_monthly_charges(organization=organization, month=month, actor=actor)


def events(organization, month=MONTH):
    resource = charge_resource(organization, month)
    return list(
        FenceEvent.objects.for_resource(resource).order_by("id").values_list("outcome", "token")
    )


def assert_nothing_written(organization):
    assert not MonthlyChargeRun.objects.for_organization(organization).exists()
    assert not MonthlyCharge.objects.for_organization(organization).exists()


def assert_one_complete_run(organization, *, completed_by: str, units: int = 10):
    run = MonthlyChargeRun.objects.get(organization=organization, month=MONTH)
    charges = MonthlyCharge.objects.filter(run=run)
    assert run.is_completed
    assert run.completed_by == completed_by
    assert charges.count() == units == run.charge_count
    assert charges.values("unit").distinct().count() == units
    return run


# -- months ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "month"), [("2026-03", date(2026, 3, 1)), ("1999-12", date(1999, 12, 1))]
)
def test_parse_month_returns_first_day(text, month):
    assert parse_month(text) == month


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("2026-13", "must be 01 to 12"),
        ("2026-00", "must be 01 to 12"),
        ("2026-3", "use YYYY-MM"),
        ("2026-03-01", "use YYYY-MM"),
        ("March", "use YYYY-MM"),
        ("", "use YYYY-MM"),
        ("0000-01", "0001 or later"),
        ("\u0662\u0660\u0662\u0666-\u0660\u0663", "use YYYY-MM"),  # Arabic-Indic digits
    ],
)
def test_parse_month_rejects_malformed_month_with_a_clear_message(text, reason):
    with pytest.raises(InvalidMonth) as excinfo:
        parse_month(text)
    assert reason in str(excinfo.value)
    assert f'"{text}" is not a month' in str(excinfo.value)
    assert isinstance(excinfo.value, ValueError)


@pytest.mark.django_db
@pytest.mark.parametrize("month", [date(2026, 3, 2), datetime(2026, 3, 1, 0, 0), "2026-03"])
def test_month_that_is_not_a_first_day_is_refused_before_locking(maple, billing, month):
    with pytest.raises(InvalidMonth):
        generate(maple, month=month)
    assert_nothing_written(maple)
    assert billing.received == []
    assert not FenceEvent.objects.exists()


# -- one caller ------------------------------------------------------------------------------


@fenced
def test_generation_inserts_one_charge_per_unit_and_bills_once(maple, billing):
    result = generate(maple, actor="cron-a")

    assert result.outcome == Outcome.COMMITTED and result.token == 1
    run = assert_one_complete_run(maple, completed_by="cron-a")
    assert run.total == MAPLE_TOTAL
    assert run.last_fence_token == 1
    amounts = dict(MonthlyCharge.objects.filter(run=run).values_list("unit__label", "amount"))
    assert amounts == {u.label: u.monthly_assessment for u in maple.units.all()}
    assert result.message == (
        f"Generated 10 charges for Maple Court, March 2026 (total ${MAPLE_TOTAL:,.2f})."
    )

    [request] = billing.received
    assert request.idempotency_key == f"monthly-charges:{maple.pk}:2026-03"
    assert request.token == 1
    body = request.json
    assert body["organization"] == {"id": maple.pk, "slug": "maple-court", "name": "Maple Court"}
    assert body["month"] == "2026-03"
    assert body["charge_count"] == 10
    assert Decimal(body["total"]) == MAPLE_TOTAL
    assert body["lines"][0] == {"unit": "M001", "amount": "201.00"}
    assert events(maple) == [("committed", 1)]


@fenced
def test_repeat_is_already_generated_and_writes_and_bills_nothing_more(maple, billing):
    generate(maple, actor="cron-a")
    again = generate(maple, actor="cron-b")

    assert again.outcome == Outcome.ALREADY_DONE and again.token == 2
    assert "were already generated (10 charges" in again.message
    run = assert_one_complete_run(maple, completed_by="cron-a")
    assert run.last_fence_token == 2  # the repeat still passed the fence
    assert len(billing.received) == 1  # a completed run is final: nothing to bill again
    # By token: A's audit row commits with its charges, B's after its transaction.
    assert sorted(events(maple), key=lambda event: event[1]) == [
        ("committed", 1),
        ("already_done", 2),
    ]


@fenced
def test_user_actor_must_be_staff_of_the_organization_with_the_permission(
    maple, billing, mallory, viewer, alice
):
    for outsider in (mallory, viewer):
        with pytest.raises(NotPermitted):
            generate(maple, actor=outsider)
    assert_nothing_written(maple)
    assert billing.received == []

    assert generate(maple, actor=alice).committed
    assert_one_complete_run(maple, completed_by="alice")


@fenced
def test_busy_resource_is_refused_naming_the_holder_and_writes_nothing(maple, billing):
    FenceLock().acquire(charge_resource(maple, MONTH), ttl=LONG_TTL, holder="bob at the front desk")
    with pytest.raises(Busy) as excinfo:
        generate(maple)
    assert excinfo.value.holder.startswith("bob at the front desk on ")
    assert "Another holder (bob at the front desk on " in str(excinfo.value)
    assert_nothing_written(maple)
    assert billing.received == []
    assert events(maple) == [("busy", 1)]


@fenced
def test_billing_refusal_writes_nothing_and_is_recorded_as_failed(maple, billing):
    billing.status = 422
    with pytest.raises(CallFailed) as excinfo:
        generate(maple)
    assert "HTTP 422" in str(excinfo.value)
    assert_nothing_written(maple)
    assert events(maple) == [("failed", 1)]
    assert not OutsideCall.objects.exists()  # refused: nothing to settle


@fenced
def test_billing_that_cannot_be_reached_is_refused_not_unknown(maple, settings):
    settings.BILLING_WEBHOOK_URL = f"http://127.0.0.1:{free_port()}/billing"  # nobody there
    with pytest.raises(CallFailed) as excinfo:
        generate(maple)
    assert excinfo.value.reason == "could not connect"
    assert_nothing_written(maple)
    assert not OutsideCall.objects.exists()


@fenced
@pytest.mark.parametrize("lost", ["timeout", "500", "redirect", "close", "partial"])
def test_a_billing_call_whose_answer_is_lost_is_unknown_recorded_and_settled_by_its_key(
    maple, billing, settings, lost
):
    """Billing received the run and its answer went astray: never "nothing was saved".
    The attempt is recorded, and settling it asks again by the same key."""
    settings.EXTERNAL_CALL_TIMEOUT_SECONDS = 0.5
    billing.lost_delay = 2
    billing.lose_answer = lambda request: lost
    with pytest.raises(OutcomeUnknown) as excinfo:
        generate(maple)

    assert excinfo.value.answer == "unknown"
    assert excinfo.value.message.startswith("The billing system did not say whether it acted")
    assert "not known yet" in str(excinfo.value)
    assert_nothing_written(maple)
    assert events(maple) == [("unknown", 1)]
    assert billing.gets == []  # a redirect is not followed as a body-less GET
    call = OutsideCall.objects.get()
    key = f"monthly-charges:{maple.pk}:2026-03"
    assert (call.endpoint, call.idempotency_key, call.settled_at) == ("billing", key, None)
    assert ReceivedCall.objects.filter(idempotency_key=key).count() == 1  # it was received

    billing.lose_answer = None
    assert settle_outside_calls().settled == 1
    assert_one_complete_run(maple, completed_by="job:settle")
    call.refresh_from_db()
    assert call.settlement == OutsideCall.Settlement.DONE
    assert {request.idempotency_key for request in billing.accepted()} == {key}
    assert ReceivedCall.objects.filter(idempotency_key=key).count() == 1  # billed once


@fenced
def test_redis_down_is_reported_and_writes_nothing(maple, billing, settings):
    settings.LOCK_REDIS_URL = dead_redis_url()
    with pytest.raises(LockServiceDown) as excinfo:
        generate(maple)
    assert "was not done: the lock service (Redis) is unavailable (" in str(excinfo.value)
    assert_nothing_written(maple)
    assert billing.received == []
    assert events(maple) == [("unavailable", None)]


@fenced
def test_organization_without_units_completes_with_zero_total(billing):
    empty = Organization.objects.create(name="Empty Acres", slug="empty-acres")
    result = generate(empty)
    assert result.committed
    assert (result.row.charge_count, result.row.total) == (0, Decimal("0.00"))
    assert billing.received[0].json["lines"] == []


@fenced
def test_lost_redis_counter_starts_a_new_epoch_before_the_billing_call(
    maple, billing, redis_client
):
    for actor in ("a", "b", "c"):
        generate(maple, actor=actor)  # the run now records token 3
    redis_client.delete(fence_key(charge_resource(maple, MONTH)))  # Redis lost its data

    result = generate(maple, actor="d")

    # The grant saw the counter gone and started epoch 1: no doomed attempt, no retry.
    assert (result.outcome, result.token) == (Outcome.ALREADY_DONE, first_token(1) + 1)
    assert MonthlyChargeRun.objects.get(organization=maple).last_fence_token == first_token(1) + 1
    assert events(maple)[-2:] == [("already_done", 3), ("already_done", first_token(1) + 1)]


# -- races -----------------------------------------------------------------------------------


@fenced
def test_eight_concurrent_generations_make_one_run_and_every_loser_is_busy(maple, billing):
    gate = billing.hold()  # the winner waits in its billing call until every loser answered
    barrier = threading.Barrier(8, timeout=15)
    workers = [
        Worker(lambda n=n: generate(maple, actor=f"worker-{n}"), barrier=barrier) for n in range(8)
    ]
    gate.wait_arrived(1)
    wait_until(lambda: sum(w.done.is_set() for w in workers) == 7, what="seven losers")
    gate.release()
    for worker in workers:
        worker.join()

    outcomes = Counter(
        Outcome.BUSY if isinstance(w.error, Busy) else w.result.outcome for w in workers
    )
    assert outcomes == {Outcome.BUSY: 7, Outcome.COMMITTED: 1}
    [winner] = [w.result for w in workers if w.result is not None]
    run = assert_one_complete_run(maple, completed_by=winner.row.completed_by)
    assert MonthlyChargeRun.objects.count() == 1
    assert run.last_fence_token == winner.token == 1
    assert len(billing.received) == 1


@fenced
def test_paused_holder_is_rejected_by_the_fence_after_a_newer_holder_commits(
    maple, billing, short_ttl, redis_client
):
    # Billing accepts A's call (token 1); its answer hangs, so the fence must refuse A.
    gate = billing.hold(lambda request: request.token == 1, answered=True)
    holder_a = Worker(lambda: generate(maple, actor="holder-a"))
    gate.wait_arrived(1)
    wait_for_lease_expiry(redis_client, maple)

    result_b = generate(maple, actor="holder-b")  # takes over: token 2, bills, commits
    gate.release()
    holder_a.join()

    assert (result_b.outcome, result_b.token) == (Outcome.COMMITTED, 2)
    assert isinstance(holder_a.error, Superseded)
    assert (holder_a.error.token, holder_a.error.recorded) == (1, 2)
    assert "A newer holder (token 2) took over" in str(holder_a.error)
    run = assert_one_complete_run(maple, completed_by="holder-b")
    assert run.last_fence_token == 2
    assert events(maple) == [("committed", 2), ("stale", 1)]
    # The billing stand-in saw both holders, with the same key and increasing tokens.
    seen = sorted(billing.received, key=lambda request: request.at)
    assert [request.token for request in seen] == [1, 2]
    assert {request.idempotency_key for request in seen} == {f"monthly-charges:{maple.pk}:2026-03"}


@fenced
def test_paused_holders_late_billing_call_is_refused_by_the_receiver_and_answered_stale(
    maple, billing, short_ttl, redis_client
):
    """A's call is still on its way when B's reaches billing: the receiver keeps B's token
    and answers A 409, which A raises as superseded, recorded stale, before any write."""
    gate = billing.hold(lambda request: request.token == 1)  # A's call arrives late
    holder_a = Worker(lambda: generate(maple, actor="holder-a"))
    gate.wait_arrived(1)
    wait_for_lease_expiry(redis_client, maple)

    result_b = generate(maple, actor="holder-b")
    gate.release()
    holder_a.join()

    assert (result_b.outcome, result_b.token) == (Outcome.COMMITTED, 2)
    assert isinstance(holder_a.error, Superseded)
    assert (holder_a.error.token, holder_a.error.recorded) == (1, 2)
    assert "A newer holder (token 2) took over" in str(holder_a.error)
    run = assert_one_complete_run(maple, completed_by="holder-b")
    assert run.last_fence_token == 2
    key = f"monthly-charges:{maple.pk}:2026-03"
    [stale] = FenceEvent.objects.filter(outcome="stale")
    assert (stale.token, stale.detail) == (
        1,
        f"{billing.url_for('billing')}: fencing token 1 is stale: the receiver had already "
        "accepted token 2",
    )
    assert events(maple) == [("committed", 2), ("stale", 1)]
    # What billing saw, in the order it answered: B accepted, A refused. One record, B's.
    assert [(r.token, r.status, r.verdict) for r in billing.received] == [
        (2, 200, "accepted"),
        (1, 409, "stale"),
    ]
    [record] = ReceivedCall.objects.filter(idempotency_key=key)
    assert (record.token, record.payload["charge_count"]) == (2, 10)


def billed_total(maple) -> str:
    """What the billing service keeps for Maple Court's March run (its receiver's record)."""
    [record] = ReceivedCall.objects.filter(idempotency_key=f"monthly-charges:{maple.pk}:2026-03")
    return record.payload["total"]


def raise_one_assessment(maple) -> None:
    """Staff raise one unit's assessment between two holders' looks (100.00 -> 150.00)."""
    unit = maple.units.order_by("label").first()
    Unit.objects.filter(pk=unit.pk).update(monthly_assessment=unit.monthly_assessment + 50)


@fenced
def test_an_older_holder_whose_call_returned_first_cannot_commit_after_a_newer_ones_claim(
    maple, billing, short_ttl, redis_client
):
    """Issue 35, point 12, one order: A's call is accepted and A pauses; staff change a
    unit; B claims, bills (the receiver replaces A's call with B's) and is held; A wakes
    and commits first. A used to commit its total and B found the run done: the run kept
    A's total, billing B's. B's claim now refuses A's commit: both keep B's."""
    gate_a = billing.hold(lambda request: request.token == 1, answered=True)
    gate_b = billing.hold(lambda request: request.token == 2)
    holder_a = Worker(lambda: generate(maple, actor="holder-a"))
    gate_a.wait_arrived(1)  # billing accepted A's call; A's answer is on its way
    wait_for_lease_expiry(redis_client, maple)
    raise_one_assessment(maple)
    holder_b = Worker(lambda: generate(maple, actor="holder-b"))
    gate_b.wait_arrived(1)  # B claimed and looked (a total 50.00 higher), its call held

    gate_a.release()  # A returns first and tries to commit: B's claim refuses it
    holder_a.join()
    gate_b.release()  # B's call replaces A's at billing; B commits
    holder_b.join()

    assert isinstance(holder_a.error, Superseded)
    assert (holder_a.error.token, holder_a.error.recorded) == (1, 2)
    assert (holder_b.result.outcome, holder_b.result.token) == (Outcome.COMMITTED, 2)
    run = assert_one_complete_run(maple, completed_by="holder-b")
    assert billed_total(maple) == str(run.total) == "2105.00"  # B's: 2055.00 + 50.00
    assert sorted(events(maple), key=lambda event: event[1]) == [("stale", 1), ("committed", 2)]
    assert [(r.token, r.verdict) for r in billing.received] == [(1, "accepted"), (2, "replaced")]


@fenced
def test_an_older_holder_whose_call_arrives_after_a_newer_ones_is_refused_by_billing(
    maple, billing, short_ttl, redis_client
):
    """Issue 35, point 12, the other order: B bills and commits while A's call is still on
    its way; A's call is refused at billing (409), so A writes nothing: both keep B's."""
    gate_a = billing.hold(lambda request: request.token == 1)  # on its way, not decided
    holder_a = Worker(lambda: generate(maple, actor="holder-a"))
    gate_a.wait_arrived(1)
    wait_for_lease_expiry(redis_client, maple)
    raise_one_assessment(maple)
    result_b = generate(maple, actor="holder-b")
    gate_a.release()
    holder_a.join()

    assert (result_b.outcome, result_b.token) == (Outcome.COMMITTED, 2)
    assert isinstance(holder_a.error, Superseded)
    run = assert_one_complete_run(maple, completed_by="holder-b")
    assert billed_total(maple) == str(run.total) == "2105.00"  # B's: 2055.00 + 50.00
    assert [(r.token, r.verdict) for r in billing.received] == [(2, "accepted"), (1, "stale")]


@fenced
def test_a_newer_holder_that_claims_after_an_older_commit_finds_the_run_done_and_calls_nobody(
    maple, billing, short_ttl, redis_client
):
    """A commits before B claims: B's look (under its claim) sees the completed run, and B
    tells billing nothing: both keep A's."""
    holder_a = generate(maple, actor="holder-a")
    wait_for_lease_expiry(redis_client, maple)
    raise_one_assessment(maple)

    result_b = generate(maple, actor="holder-b")

    assert (holder_a.outcome, result_b.outcome) == (Outcome.COMMITTED, Outcome.ALREADY_DONE)
    run = assert_one_complete_run(maple, completed_by="holder-a")
    assert billed_total(maple) == str(run.total) == "2055.00"  # A's, before the raise
    assert [request.token for request in billing.received] == [1]


@fenced
def test_newer_holder_waits_on_the_row_lock_of_a_holder_paused_before_commit(
    maple, billing, short_ttl, redis_client
):
    db = connection.settings_dict
    blocker = psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"])
    try:
        # Holder A inserts the run row with its token on it (insert_fenced), then blocks on
        # its COPY of the charges: this connection holds a conflicting lock.
        blocker.execute("LOCK TABLE charges_monthlycharge IN SHARE ROW EXCLUSIVE MODE")
        holder_a = Worker(lambda: generate(maple, actor="holder-a"))
        wait_until(
            lambda: waiting_statements('COPY "charges_monthlycharge"') == 1,
            what="holder A to block on its COPY",
        )
        wait_for_lease_expiry(redis_client, maple)
        holder_b = Worker(lambda: generate(maple, actor="holder-b"))
        # A's fence holds the resource's record until A commits: B's claim waits on it.
        wait_until(
            lambda: waiting_statements("WITH claim AS") == 1,
            what="holder B's claim to wait on the resource's record",
        )
        assert not holder_b.done.is_set()
    finally:
        blocker.commit()  # A's COPY proceeds and A commits; B's claim then passes (2 > 1),
        # its look finds A's completed run, and it commits with nothing to bill
        blocker.close()
    holder_a.join()
    holder_b.join()

    assert (holder_a.result.outcome, holder_a.result.token) == (Outcome.COMMITTED, 1)
    assert (holder_b.result.outcome, holder_b.result.token) == (Outcome.ALREADY_DONE, 2)
    run = assert_one_complete_run(maple, completed_by="holder-a")
    assert run.last_fence_token == 2
    # By token: A's audit row commits with its charges, B's after its transaction.
    assert sorted(events(maple), key=lambda event: event[1]) == [
        ("committed", 1),
        ("already_done", 2),
    ]


# -- selectors -------------------------------------------------------------------------------


@fenced
def test_monthly_totals_cover_twelve_months_with_zero_for_missing_ones(maple, billing):
    generate(maple, month=date(2026, 3, 1))
    generate(maple, month=date(2025, 4, 1))
    generate(maple, month=date(2025, 3, 1))  # thirteen months back: outside the window

    totals = monthly_totals(organization=maple, until=date(2026, 3, 1))

    assert [month for month, _ in totals] == [date(2025, n, 1) for n in range(4, 13)] + [
        date(2026, n, 1) for n in range(1, 4)
    ]
    assert dict(totals)[date(2026, 3, 1)] == MAPLE_TOTAL
    assert dict(totals)[date(2025, 4, 1)] == MAPLE_TOTAL
    assert sum(total for _, total in totals) == 2 * MAPLE_TOTAL
