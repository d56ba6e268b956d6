"""Racing payments, and voids racing payments: real threads with their own connections,
each interleaving forced.

Each test holds a chosen payment call at a gate of the stand-in payment service (before it
decides, or after it paid with the answer on its way back), so the holder is provably
inside its external call while the other attempt runs. Money leaves once: the stand-in's
ledger (``payments``) holds one payment per invoice whatever happens.
"""

import threading

import pytest
from django.db import transaction

from hoa.answers.refusals import Busy, OutcomeUnknown, Superseded
from hoa.fenced import Result
from hoa.models import StaffMembership
from locking.epochs import first_token
from locking.keys import lock_key
from tests.harness.waiting import wait_until
from tests.invoices_support import (
    AMOUNT,
    approve,
    assignment_of,
    paid_keys,
    paid_state,
    payment_calls,
    payment_events,
    record,
    timeline,
)
from tests.vendors_support import WAIT, Worker
from vendors import invoices
from vendors.exceptions import InvoiceChangedBeforePaying, PaymentSent
from vendors.models import Invoice, VendorPayment
from vendors.operations import payment_resource
from vendors.payment_client import idempotency_key
from vendors.payments import pay_invoice

pytestmark = pytest.mark.django_db(transaction=True)

SHORT_TTL = (
    1.0  # seconds: long enough to be granted and claim under load, short enough to expire mid-call
)
Status = Invoice.Status


def paying(invoice, actor, name=""):
    return Worker(lambda: pay_invoice(invoice=invoice, actor=actor), name=name or actor.username)


def wait_for_lease_to_expire(redis_client, invoice) -> None:
    key = lock_key(payment_resource(invoice.pk))
    wait_until(lambda: not redis_client.exists(key), what="the payment lease to expire")


def test_two_staff_paying_at_once_one_pays_and_the_other_is_told_who_holds_it(
    approved, payments, alice, bob
):
    gate = payments.hold()  # every payment call waits here until released
    barrier = threading.Barrier(2)
    workers = [
        Worker(
            lambda who=who: pay_invoice(invoice=approved, actor=who),
            barrier=barrier,
            name=who.username,
        )
        for who in (alice, bob)
    ]
    for worker in workers:
        worker.start()
    gate.wait_arrived(1)  # one holds the lease, inside its call...
    wait_until(lambda: any(w.finished.is_set() for w in workers), what="the loser's answer")
    [loser] = [w for w in workers if w.finished.is_set()]
    [winner] = [w for w in workers if w is not loser]
    assert gate.arrived == 1  # ...while the other ran to its answer without calling
    gate.release()

    won, lost = winner.outcome(), loser.outcome()
    assert isinstance(won, Result) and (won.outcome, won.token) == ("committed", 1)
    assert isinstance(lost, Busy)
    assert lost.holder.startswith(f"{winner.name} on ")
    assert paid_keys(payments) == [(idempotency_key(approved.pk), 1)]
    assert VendorPayment.objects.count() == 1
    assert sorted(payment_events(approved)) == [("busy", 1), ("committed", 1)]


def test_a_paused_payer_whose_payment_went_through_is_refused_and_money_leaves_once(
    approved, payments, alice, bob, redis_client, settings
):
    """A's call was paid by the service; its answer hangs past A's lease. B, the next
    payer, asks the service again (a higher token, the same key): the service answers with
    A's payment and pays nothing; B records it. A's commit is refused by the fence."""
    settings.VENDOR_PAYMENT_LOCK_TTL_SECONDS = SHORT_TTL
    gate = payments.hold(lambda request: request.token == 1, answered=True)
    paused = paying(approved, alice, "paused")
    paused.start()
    gate.wait_arrived(1)  # the service paid A's call (token 1); its answer waits
    wait_for_lease_to_expire(redis_client, approved)

    newer = pay_invoice(invoice=approved, actor=bob)
    gate.release()
    late = paused.outcome()

    assert (newer.outcome, newer.token) == ("committed", 2)
    assert isinstance(late, Superseded)
    assert (late.token, late.recorded) == (1, 2)
    [payment] = VendorPayment.objects.all()
    assert (payment.fence_token, payment.paid_by) == (2, bob)
    assert paid_keys(payments) == [(idempotency_key(approved.pk), 1)]  # paid once, by A's call
    assert payment_calls(payments) == [(1, 200, "accepted"), (2, 200, "replaced")]
    assert payment.reference == payments.payments[0].reference
    assert paid_state(approved) == (Status.PAID, 2, 2, [(2, payment.reference)])
    assert payment_events(approved) == [("committed", 2), ("stale", 1)]


def test_a_paused_payers_late_call_is_refused_by_the_service_after_a_newer_one_paid(
    approved, payments, alice, bob, redis_client, settings
):
    """A's call is still on its way when its lease runs out; B pays. A's call reaches the
    service after B's: refused as stale (409), nothing paid; A answers superseded."""
    settings.VENDOR_PAYMENT_LOCK_TTL_SECONDS = SHORT_TTL
    gate = payments.hold(lambda request: request.token == 1)  # before the service decides
    paused = paying(approved, alice, "paused")
    paused.start()
    gate.wait_arrived(1)
    wait_for_lease_to_expire(redis_client, approved)

    newer = pay_invoice(invoice=approved, actor=bob)
    gate.release()
    late = paused.outcome()

    assert (newer.outcome, newer.token) == ("committed", 2)
    assert isinstance(late, Superseded)
    assert paid_keys(payments) == [(idempotency_key(approved.pk), 2)]
    assert payment_calls(payments) == [(2, 200, "accepted"), (1, 409, "stale")]
    assert paid_state(approved)[:3] == (Status.PAID, 2, 2)
    assert payment_events(approved) == [("committed", 2), ("stale", 1)]


def test_an_older_payer_whose_call_returned_first_cannot_commit_after_a_newer_ones_claim(
    approved, payments, alice, bob, redis_client, settings
):
    """A (token 1) and B (token 2) are both inside their calls: the service paid on A's and
    answered B's, a replacement, with the same payment. A's call returns first, but B's
    claim is committed on the resource's record: A's fence is refused, nothing of it
    written; B records the payment, under its token. The service paid once."""
    settings.VENDOR_PAYMENT_LOCK_TTL_SECONDS = SHORT_TTL
    gate_a = payments.hold(lambda request: request.token == 1, answered=True)
    gate_b = payments.hold(lambda request: request.token == 2, answered=True)
    older = paying(approved, alice, "older")
    older.start()
    gate_a.wait_arrived(1)
    wait_for_lease_to_expire(redis_client, approved)
    newer = paying(approved, bob, "newer")
    newer.start()
    gate_b.wait_arrived(1)  # both have told the service: tokens 1 and 2

    gate_a.release()
    first = older.outcome()
    gate_b.release()
    second = newer.outcome()

    assert isinstance(first, Superseded) and (first.token, first.recorded) == (1, 2)
    assert (second.outcome, second.token) == ("committed", 2)
    assert payment_calls(payments) == [(1, 200, "accepted"), (2, 200, "replaced")]
    assert paid_keys(payments) == [(idempotency_key(approved.pk), 1)]  # paid once
    assert paid_state(approved) == (Status.PAID, 2, 2, [(2, second.row.reference)])
    assert payment_events(approved) == [("stale", 1), ("committed", 2)]


def test_paying_again_after_redis_lost_its_data_pays_on_the_first_call(
    approved, payments, alice, redis_client
):
    """The first attempt's call ended unknown (a 503: token 1, the invoice claimed); Redis
    then loses the counter. The next grant starts epoch 1 before any call: its token is
    above every token of epoch 0, and the service, which had kept nothing, pays once."""
    payments.status = 503
    with pytest.raises(OutcomeUnknown):
        pay_invoice(invoice=approved, actor=alice)
    payments.status = None
    redis_client.flushdb()  # restarted without persistence: the counter and the lease gone

    result = pay_invoice(invoice=approved, actor=alice)

    token = first_token(1) + 1
    assert (result.outcome, result.token) == ("committed", token)
    assert [token for token, _status, _verdict in payment_calls(payments)] == [1, token]
    assert paid_keys(payments) == [(idempotency_key(approved.pk), token)]
    assert paid_state(approved)[:3] == (Status.PAID, token, token)
    assert payment_events(approved) == [("unknown", 1), ("committed", token)]


# -- voiding and paying one invoice at once ---------------------------------------------------


def test_a_void_that_wins_the_row_first_stops_the_payment_before_the_service_hears_of_it(
    approved, payments, alice, bob
):
    """The payer's claim waits for the void's row lock (a hold point: the void's
    transaction is kept open); the void commits; the claim finds the invoice void and the
    payer is told, nothing paid or told."""
    seen = Invoice.objects.get(pk=approved.pk).version
    voided, may_commit = threading.Event(), threading.Event()

    def void():
        with transaction.atomic():
            change = invoices.void_invoice(
                invoice=approved, seen=seen, reason="Sent twice", actor=alice
            )
            voided.set()
            assert may_commit.wait(WAIT)
        return change

    voider = Worker(void, name="voider")
    voider.start()
    assert voided.wait(WAIT)
    payer = paying(approved, bob, "payer")
    payer.start()
    wait_until(_a_backend_waits_on_a_lock, what="the payer's claim to wait on the void's row")
    may_commit.set()
    change, refused = voider.outcome(), payer.outcome()

    assert change.invoice.status == Status.VOID
    assert isinstance(refused, InvoiceChangedBeforePaying)
    assert refused.answer == "overtaken"
    assert refused.message == (
        f"Invoice #{approved.pk} changed before it was paid: it is now void, for $250.00; "
        "nothing was paid."
    )
    assert payments.received == [] and payments.payments == []
    assert paid_state(approved) == (Status.VOID, None, 0, [])
    assert payment_events(approved) == [("conflict", 1)]


def test_a_payment_that_claimed_the_invoice_first_makes_the_void_wait_and_be_told(
    approved, payments, alice, bob
):
    """The payer has claimed the invoice and is inside its call (held at the service): the
    void is refused, nothing written; the payment goes through."""
    gate = payments.hold()
    payer = paying(approved, bob, "payer")
    payer.start()
    gate.wait_arrived(1)
    seen = Invoice.objects.get(pk=approved.pk).version

    with pytest.raises(PaymentSent) as refused:
        invoices.void_invoice(invoice=approved, seen=seen, reason="Sent twice", actor=alice)
    gate.release()
    result = payer.outcome()

    assert refused.value.answer == "overtaken"
    assert (result.outcome, result.token) == ("committed", 1)
    assert paid_state(approved)[0] == Status.PAID
    assert len(payments.payments) == 1
    assert "voided" not in [kind for kind, *_ in timeline(approved)]


def _a_backend_waits_on_a_lock() -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0


def test_eight_payers_of_one_invoice_at_once_money_leaves_once(
    maple, pipe, payments, alice, bob, django_user_model, staff_permissions
):
    staff = []
    for number in range(8):
        user = django_user_model.objects.create_user(username=f"clerk{number}", password="pw")
        user.groups.add(staff_permissions)
        StaffMembership.objects.create(user=user, organization=maple)
        staff.append(user)
    invoice = approve(record(assignment_of(maple, pipe), alice, number="RUSH-1"), bob)
    gate = payments.hold()
    barrier = threading.Barrier(8)
    workers = [
        Worker(lambda who=who: pay_invoice(invoice=invoice, actor=who), barrier=barrier)
        for who in staff
    ]
    for worker in workers:
        worker.start()
    gate.wait_arrived(1)
    wait_until(lambda: sum(w.finished.is_set() for w in workers) == 7, what="seven answers")
    gate.release()
    outcomes = [worker.outcome() for worker in workers]

    assert sorted(type(outcome).__name__ for outcome in outcomes) == ["Busy"] * 7 + ["Result"]
    assert len(payments.payments) == 1 and len(payments.received) == 1
    assert VendorPayment.objects.filter(invoice=invoice).count() == 1
    assert Invoice.objects.get(pk=invoice.pk).amount == AMOUNT
