"""The nightly payment run's batches (``pay_together``): invoices committed in one
transaction, each under its own lease, against real PostgreSQL, Redis and HTTP.

What must hold is what holds one at a time: each invoice paid by the service and recorded
exactly once, and one invoice's refusal (busy, a newer holder, a failed call) costs the
others nothing. The races force their interleaving with the stand-in's gate.
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hoa.answers.refusals import Busy, OutcomeUnknown, Superseded
from hoa.fenced import Result
from locking import FenceLock, Outcome
from locking.keys import lock_key
from tests.charges_support import Worker
from tests.harness.waiting import wait_until
from tests.invoices_support import (
    approve,
    assignment_of,
    paid_keys,
    paid_state,
    payment_events,
    record,
)
from vendors.models import Invoice
from vendors.operations import payment_resource
from vendors.payment_client import idempotency_key
from vendors.payments import pay_invoice, pay_together

pytestmark = pytest.mark.django_db(transaction=True)
Status = Invoice.Status


@pytest.fixture
def three(maple, pipe, alice, bob) -> list[Invoice]:
    """Three approved invoices of Maple Court."""
    return [
        approve(
            record(
                assignment_of(maple, pipe, f"Job {n}"),
                alice,
                number=f"T-{n}",
                amount=Decimal(f"{n}0.00"),
            ),
            bob,
        )
        for n in (1, 2, 3)
    ]


def refreshed(invoices):
    return [Invoice.objects.select_related("organization", "vendor").get(pk=i.pk) for i in invoices]


def test_a_batch_pays_each_invoice_once_with_its_own_token_in_one_transaction(three, payments):
    with CaptureQueriesContext(connection) as statements:
        answers = pay_together(three, actor=None, via="cron-a")

    assert [type(answer) for answer in answers] == [Result] * 3
    assert [(answer.outcome, answer.token) for answer in answers] == [(Outcome.COMMITTED, 1)] * 3
    assert sorted(paid_keys(payments)) == sorted((idempotency_key(i.pk), 1) for i in three)
    for invoice in three:
        assert paid_state(invoice)[:3] == (Status.PAID, 1, 1)
        assert payment_events(invoice) == [("committed", 1)]
    # One COMMIT for the three payments, besides the runner's claims on the resources'
    # records (one transaction for the three) and each invoice's claim before its call.
    commits = [q["sql"] for q in statements.captured_queries if q["sql"] == "COMMIT"]
    assert len(commits) == 1 + 3 + 1
    # Again: each one is already paid, and the service is asked nothing.
    again = pay_together(refreshed(three), actor=None, via="cron-a")
    assert [answer.outcome for answer in again] == [Outcome.ALREADY_DONE] * 3
    assert len(payments.received) == 3


def test_a_busy_invoice_in_a_batch_is_answered_busy_and_the_others_are_paid(three, payments):
    held = FenceLock().acquire(
        payment_resource(three[1].pk), ttl=timedelta(seconds=30), holder="bob"
    )
    try:
        answers = pay_together(three, actor=None, via="cron-a")
    finally:
        held.release()

    assert isinstance(answers[1], Busy)
    assert [answers[0].outcome, answers[2].outcome] == [Outcome.COMMITTED] * 2
    assert paid_state(three[1]) == (Status.APPROVED, None, 0, [])
    assert sorted(key for key, _ in paid_keys(payments)) == sorted(
        idempotency_key(i.pk) for i in (three[0], three[2])
    )


def test_a_call_of_unknown_outcome_in_a_batch_costs_the_others_nothing(three, payments):
    failing = idempotency_key(three[0].pk)
    payments.status_for = lambda request: 503 if request.idempotency_key == failing else None

    answers = pay_together(three, actor=None, via="cron-a")

    assert isinstance(answers[0], OutcomeUnknown)
    assert [answers[1].outcome, answers[2].outcome] == [Outcome.COMMITTED] * 2
    assert paid_state(three[0]) == (Status.APPROVED, 1, 0, [])  # claimed: in doubt


def test_a_payer_overtaken_inside_a_batch_rolls_back_only_its_own_invoice(
    three, payments, settings, redis_client
):
    """The batch's call for the second invoice was paid but its answer hangs past the
    lease; a newer payer records that payment meanwhile. The batch's fence on the second
    invoice then refuses its older token in the invoice's savepoint; the first and third,
    in the same transaction, are paid."""
    settings.VENDOR_PAYMENT_LOCK_TTL_SECONDS = 1.0
    second = three[1]
    key = idempotency_key(second.pk)
    gate = payments.hold(lambda r: r.idempotency_key == key and r.token == 1, answered=True)
    batch = Worker(lambda: pay_together(three, actor=None, via="cron-a"))
    gate.wait_arrived(1)
    wait_until(
        lambda: not redis_client.exists(lock_key(payment_resource(second.pk))),
        what="the second invoice's lease to expire",
    )
    newer = pay_invoice(invoice=refreshed([second])[0], actor=None, via="holder-b")
    gate.release()
    batch.join()

    assert batch.error is None
    first_answer, second_answer, third_answer = batch.result
    assert (newer.outcome, newer.token) == (Outcome.COMMITTED, 2)
    assert isinstance(second_answer, Superseded)
    assert (second_answer.token, second_answer.recorded) == (1, 2)
    assert [first_answer.outcome, third_answer.outcome] == [Outcome.COMMITTED] * 2
    assert paid_state(second)[:3] == (Status.PAID, 2, 2)
    assert payment_events(second) == [("committed", 2), ("stale", 1)]
    # The service paid the second invoice once: the batch's call, answered again to B.
    assert [token for paid_key, token in paid_keys(payments) if paid_key == key] == [1]
