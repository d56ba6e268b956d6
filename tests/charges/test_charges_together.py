"""The month start's batches (``generate_together``): associations committed in one
transaction, each under its own lease, against real PostgreSQL, Redis and HTTP.

What must hold is what holds one at a time: each association billed and written exactly
once, and one association's refusal (busy, a newer holder) costs the others nothing. The
races force their interleaving with the billing stand-in's gate, as
tests/charges/test_charges_service.py does.
"""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from charges.models import MonthlyCharge, MonthlyChargeRun
from charges.operations import GENERATION, charge_resource
from charges.services import (
    ChargeRun,
    generate_monthly_charges,
    generate_together,
)
from hoa.answers.refusals import Busy, CallFailed, LockServiceDown, Superseded
from hoa.fenced import Result, run_together
from hoa.models import Organization, Unit
from locking import FenceLock, Outcome
from locking.models import FenceEvent
from tests.charges_support import MONTH, Worker, dead_redis_url, wait_for_lease_expiry

fenced = pytest.mark.django_db(transaction=True)
MONTH_TTL = timedelta(seconds=30)


@pytest.fixture
def cedar(db):
    org = Organization.objects.create(name="Cedar Walk", slug="cedar-walk")
    Unit.objects.bulk_create(
        Unit(organization=org, label=f"C{n:03d}", monthly_assessment=Decimal("150.00"))
        for n in range(1, 4)
    )
    return org


def together(*organizations, via="cron-a"):
    return generate_together([(o, MONTH, None) for o in organizations], actor=None, via=via)


def events(organization):
    resource = charge_resource(organization, MONTH)
    return list(
        FenceEvent.objects.for_resource(resource).order_by("id").values_list("outcome", "token")
    )


def completed_by(organization) -> str:
    run = MonthlyChargeRun.objects.get(organization=organization, month=MONTH)
    assert run.is_completed
    charges = MonthlyCharge.objects.filter(run=run)
    assert charges.count() == run.charge_count == organization.units.count()
    return run.completed_by


@fenced
def test_a_batch_bills_and_writes_each_association_once_with_its_own_token(
    maple, oak, cedar, billing
):
    answers = together(maple, oak, cedar)

    assert [type(answer) for answer in answers] == [Result] * 3
    assert [(answer.outcome, answer.token) for answer in answers] == [(Outcome.COMMITTED, 1)] * 3
    for organization in (maple, oak, cedar):
        assert completed_by(organization) == "cron-a"
        assert events(organization) == [("committed", 1)]
    assert len(billing.received) == 3
    # Again: each one is already done, and nobody is billed twice.
    again = together(maple, oak, cedar)
    assert [answer.outcome for answer in again] == [Outcome.ALREADY_DONE] * 3
    assert len(billing.received) == 3


@fenced
def test_a_busy_association_in_a_batch_is_answered_busy_and_the_others_commit(
    maple, oak, cedar, billing
):
    held = FenceLock().acquire(charge_resource(oak, MONTH), ttl=MONTH_TTL, holder="bob")
    try:
        answers = together(maple, oak, cedar)
    finally:
        held.release()

    assert isinstance(answers[1], Busy)
    assert "bob" in str(answers[1])
    assert [answers[0].outcome, answers[2].outcome] == [Outcome.COMMITTED] * 2
    assert completed_by(maple) == completed_by(cedar) == "cron-a"
    assert not MonthlyChargeRun.objects.filter(organization=oak).exists()
    assert [outcome for outcome, _ in events(oak)] == ["busy"]
    assert sorted(r.json["organization"]["slug"] for r in billing.received) == [
        "cedar-walk",
        "maple-court",
    ]


@fenced
def test_a_holder_overtaken_inside_a_batch_rolls_back_only_its_own_association(
    maple, oak, cedar, billing, settings, redis_client
):
    """The batch's call for Oak Ridge hangs past its lease; a newer holder bills and
    commits Oak Ridge meanwhile. The batch's own Oak Ridge row then exists: its fence
    refuses the older token in Oak Ridge's savepoint, and Maple and Cedar, in the same
    transaction, commit."""
    settings.CHARGES_LOCK_TTL_SECONDS = 0.3
    oak_key = f"monthly-charges:{oak.pk}:2026-03"
    gate = billing.hold(lambda r: r.idempotency_key == oak_key and r.token == 1, answered=True)
    batch = Worker(lambda: together(maple, oak, cedar))
    gate.wait_arrived(1)  # Maple billed, Oak Ridge's call accepted and its answer held
    wait_for_lease_expiry(redis_client, oak)

    newer = generate_monthly_charges(organization=oak, month=MONTH, actor=None, via="holder-b")
    gate.release()
    batch.join()

    assert batch.error is None
    maple_answer, oak_answer, cedar_answer = batch.result
    assert (newer.outcome, newer.token) == (Outcome.COMMITTED, 2)
    assert isinstance(oak_answer, Superseded)
    assert (oak_answer.token, oak_answer.recorded) == (1, 2)
    assert [maple_answer.outcome, cedar_answer.outcome] == [Outcome.COMMITTED] * 2
    assert completed_by(maple) == completed_by(cedar) == "cron-a"
    assert completed_by(oak) == "holder-b"
    assert MonthlyChargeRun.objects.get(organization=oak).last_fence_token == 2
    assert events(oak) == [("committed", 2), ("stale", 1)]
    assert events(maple) == [("committed", 1)]
    # Cedar's lease ran out while Oak Ridge's call hung: it was granted again (its first
    # grant released unrecorded, its claim superseded by the second one's).
    assert events(cedar) == [("committed", 2)]


@fenced
def test_a_batch_commits_early_once_its_first_lease_has_used_half_its_time(
    maple, oak, cedar, billing, settings
):
    """A slow billing call: what was gathered commits before the first lease runs out, and
    the rest forms the next transaction."""
    settings.CHARGES_LOCK_TTL_SECONDS = 1.0
    maple_key = f"monthly-charges:{maple.pk}:2026-03"
    gate = billing.hold(lambda request: request.idempotency_key == maple_key)
    opener = threading.Timer(0.7, gate.release)  # Maple's call lasts 0.7 s: over half its TTL
    opener.start()
    try:
        with CaptureQueriesContext(connection) as queries:
            answers = together(maple, oak, cedar)
    finally:
        opener.cancel()
        gate.release()

    assert [answer.outcome for answer in answers] == [Outcome.COMMITTED] * 3
    statements = [query["sql"].strip() for query in queries.captured_queries]
    run_row = 'inserted AS (INSERT INTO "charges_monthlychargerun"'
    committed = [
        "run" if run_row in sql else sql for sql in statements if sql == "COMMIT" or run_row in sql
    ]
    # The three claims commit together; Maple's run once its call is back (past half the
    # TTL); Oak Ridge's and Cedar Walk's, their leases extended, in the next transaction.
    assert committed == ["COMMIT", "run", "COMMIT", "run", "run", "COMMIT"]
    for organization in (maple, oak, cedar):
        assert completed_by(organization) == "cron-a"
        assert events(organization) == [("committed", 1)]


@fenced
def test_redis_down_at_a_grant_answers_the_rest_of_the_batch_without_trying_them(
    maple, oak, cedar, billing, settings
):
    """The first grant finds Redis unreachable; the others would each wait for it to fail
    too (a timeout apiece when it hangs): they get the same answer untried."""
    settings.LOCK_REDIS_URL = dead_redis_url()
    answers = together(maple, oak, cedar)

    assert [type(answer) for answer in answers] == [LockServiceDown] * 3
    # One attempt was made and recorded; nothing written, nobody billed.
    assert list(FenceEvent.objects.values_list("outcome", flat=True)) == ["unavailable"]
    assert not MonthlyChargeRun.objects.exists()
    assert billing.received == []


class RefusedAfterWriting(ChargeRun):
    """Steps whose ``commit`` writes (a unit renamed) and then refuses: what a savepoint
    must take back without taking back the batch."""

    def create(self, lease, looked, told):
        return None  # the run row exists: fence it, then commit

    def commit(self, lease, looked, told):
        first = self.organization.units.order_by("pk").first()
        Unit.objects.filter(pk=first.pk).update(label="half-written")
        raise CallFailed(
            operation=GENERATION, reason="refused after writing", status=None,
            organization=self.organization, month=self.month,
        )  # fmt: skip


@fenced
def test_a_refusal_after_writes_in_a_batch_rolls_back_its_own_savepoint_only(maple, oak, billing):
    MonthlyChargeRun.objects.create(organization=maple, month=MONTH)  # pending: fenced, then commit
    labels = sorted(maple.units.values_list("label", flat=True))
    calls = [
        GENERATION.begin(None, organization=o, resource=charge_resource(o, MONTH), via="cron-a")
        for o in (maple, oak)
    ]
    refusing = RefusedAfterWriting(organization=maple, month=MONTH, by=calls[0].label)
    billing_oak = ChargeRun(organization=oak, month=MONTH, by=calls[1].label)

    refused, committed = run_together([(calls[0], refusing), (calls[1], billing_oak)])

    assert isinstance(refused, CallFailed)
    assert committed.outcome == Outcome.COMMITTED
    assert sorted(maple.units.values_list("label", flat=True)) == labels  # taken back
    assert completed_by(oak) == "cron-a"  # committed in the same transaction
    assert events(maple) == [("failed", 1)]
