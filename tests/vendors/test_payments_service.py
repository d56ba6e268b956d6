"""pay_invoice, the third fenced operation (issue 38, item 4): checks before the lease, the
claim, the payment call, the fenced transaction, and what each refusal leaves."""

from datetime import date, timedelta

import pytest
from django.core import checks
from django.db import connection
from django.http import HttpResponse

from hoa.answers.refusals import Busy, CallFailed, LockServiceDown, NotPermitted, OutcomeUnknown
from hoa.jobs.settling import settle_outside_calls
from hoa.models import AccessDenial, OutsideCall
from locking.models import FenceEvent
from tests.charges_support import dead_redis_url
from tests.harness.http import payment_reference
from tests.harness.pg import round_trips
from tests.invoices_support import (
    AMOUNT,
    paid_keys,
    paid_state,
    payment_calls,
    payment_events,
    record,
    timeline,
)
from tests.vendors_support import lock_keys, uninsured_vendor
from vendors import invoices
from vendors.exceptions import (
    InvoiceRefused,
    InvoiceRule,
    PaymentSent,
    PaymentServiceNotConfigured,
    VendorNotInsured,
)
from vendors.models import Invoice, VendorPayment
from vendors.operations import payment_resource
from vendors.payment_client import idempotency_key
from vendors.payments import pay_invoice

pytestmark = pytest.mark.django_db(transaction=True)
before_the_lease = pytest.mark.django_db

Status = Invoice.Status


def nothing_written(invoice, redis_client) -> None:
    assert paid_state(invoice) == (Status.APPROVED, None, 0, [])
    assert lock_keys(redis_client) == []
    assert not FenceEvent.objects.exists()


def test_paying_calls_the_service_once_and_records_the_payment_under_the_fence(
    approved, payments, alice
):
    result = pay_invoice(invoice=approved, actor=alice, ip="10.0.0.9")

    assert (result.outcome, result.token, result.committed) == ("committed", 1, True)
    [(key, token)] = paid_keys(payments)
    assert (key, token) == (idempotency_key(approved.pk), 1)
    [request] = payments.received
    assert (request.idempotency_key, request.token, request.verdict) == (key, 1, "accepted")
    assert request.headers["X-Signature"].startswith("sha256=")
    body = request.json
    assert body["invoice"] == {
        "id": approved.pk,
        "number": "PAY-1",
        "amount": "250.00",
        "currency": "USD",
        "issued_on": approved.issued_on.isoformat(),
        "due_on": approved.due_on.isoformat(),
    }
    payment = VendorPayment.objects.get()
    assert (payment.amount, payment.currency, payment.paid_by, payment.actor_label) == (
        AMOUNT,
        "USD",
        alice,
        "alice",
    )
    assert paid_state(approved) == (Status.PAID, 1, 1, [(1, payment.reference)])
    assert result.message == (
        f"Paid Pipe Pros $250.00 for invoice #{approved.pk} (reference {payment.reference})."
    )
    assert str(result).endswith("(token 1).")
    assert [kind for kind, *_ in timeline(approved)] == [
        "recorded",
        "approved",
        "payment_sent",
        "paid",
    ]
    assert timeline(approved)[-1] == ("paid", "alice", "approved", "paid", payment.reference)
    event = FenceEvent.objects.get()
    assert (event.outcome, event.token, event.operation, event.actor, event.ip) == (
        "committed",
        1,
        "vendor-payment",
        "alice",
        "10.0.0.9",
    )
    assert event.scope == f"org:{approved.organization_id}"


def test_paying_a_paid_invoice_again_is_already_done_without_a_call(approved, payments, alice):
    first = pay_invoice(invoice=approved, actor=alice)
    again = pay_invoice(invoice=Invoice.objects.get(pk=approved.pk), actor=alice)

    assert (again.outcome, again.row.pk) == ("already_done", first.row.pk)
    assert again.message.startswith(f"Invoice #{approved.pk} was already paid: Pipe Pros")
    assert len(payments.received) == 1 and len(payments.payments) == 1
    assert payment_events(approved) == [("committed", 1), ("already_done", 2)]


def test_a_payment_makes_at_most_sixteen_database_round_trips(
    approved, payments, alice, django_assert_max_num_queries
):
    # The actor's checks already made (as after a view's). Then: the vendor's contracts
    # (insurance), the resource's first epoch; the runner's claim on the resource's record
    # (committed on its own); the look (invoice, payment); the invoice's claim (BEGIN,
    # UPDATE, its event, COMMIT); BEGIN, the fence with the audit row (one statement), the
    # state check, the invoice paid, the payment, its event, COMMIT. Counted as Django
    # logs statements, and as waits on the wire.
    alice.has_perm("vendors.pay_invoice")
    approved.organization.has_staff(alice)
    with django_assert_max_num_queries(16), round_trips(connection) as trips:
        pay_invoice(invoice=approved, actor=alice)
    assert trips.count == 16
    assert paid_state(approved)[0] == Status.PAID


# -- refused before the lease ---------------------------------------------------------------


@before_the_lease
def test_no_payment_service_is_never_skipped_paying_is_refused(
    approved, alice, settings, redis_client
):
    settings.VENDOR_PAYMENT_URL = ""
    with pytest.raises(PaymentServiceNotConfigured) as refused:
        pay_invoice(invoice=approved, actor=alice)

    assert refused.value.answer == "unavailable"
    assert refused.value.message == (
        f"No payment service is configured (VENDOR_PAYMENT_URL), so invoice #{approved.pk} "
        "was not paid; nothing was saved."
    )
    nothing_written(approved, redis_client)


@before_the_lease
def test_check_deploy_reports_an_unset_payment_service_as_an_error(settings):
    settings.VENDOR_PAYMENT_URL = ""
    found = list(checks.run_checks(include_deployment_checks=True))
    [error] = [message for message in found if message.id == "vendors.E001"]
    assert error.level == checks.ERROR
    settings.VENDOR_PAYMENT_URL = "https://payments.example.org/pay"
    found = checks.run_checks(include_deployment_checks=True)
    assert not [message for message in found if message.id == "vendors.E001"]


@before_the_lease
@pytest.mark.parametrize("status", ["received", "rejected", "void"])
def test_an_invoice_that_is_not_approved_is_refused(
    assignment, alice, payments, redis_client, status
):
    invoice = record(assignment, alice)
    Invoice.objects.filter(pk=invoice.pk).update(status=status)
    invoice.refresh_from_db()
    with pytest.raises(InvoiceRefused) as refused:
        pay_invoice(invoice=invoice, actor=alice)
    assert refused.value.rule == InvoiceRule.NOT_APPROVED
    assert refused.value.answer == "bad-request"
    assert payments.received == [] and lock_keys(redis_client) == []


@before_the_lease
def test_an_uninsured_vendor_is_not_paid(maple, alice, bob, payments, redis_client):
    from tests.invoices_support import approve, assignment_of

    vendor = uninsured_vendor("Bright Spark", maple, lapsed_days_ago=4)
    invoice = approve(record(assignment_of(maple, vendor), alice, number="B-9"), bob)
    with pytest.raises(VendorNotInsured) as refused:
        pay_invoice(invoice=invoice, actor=alice)
    assert "insurance certificate with Maple Court lapsed on" in refused.value.message
    nothing_written(invoice, redis_client)
    assert payments.received == []


@before_the_lease
@pytest.mark.parametrize("persona", ["mallory", "viewer", "nobody"])
def test_an_actor_who_may_not_pay_is_refused_and_recorded(
    approved, payments, redis_client, request, persona
):
    actor = request.getfixturevalue(persona)
    with pytest.raises(NotPermitted) as refused:
        pay_invoice(invoice=approved, actor=actor)
    assert refused.value.message == f"{persona} may not pay invoices of Maple Court."
    assert AccessDenial.objects.filter(operation="vendor-payment", actor=persona).count() == 1
    assert paid_state(approved) == (Status.APPROVED, None, 0, [])
    assert payments.received == []


# -- refused under the lease ----------------------------------------------------------------


def test_a_held_lease_answers_busy_naming_the_holder_and_nothing_is_told(
    approved, payments, alice, fence_lock
):
    holder = fence_lock.acquire(
        payment_resource(approved.pk), ttl=timedelta(seconds=30), holder="bob at the desk"
    )
    with pytest.raises(Busy) as busy:
        pay_invoice(invoice=approved, actor=alice)
    holder.release()

    assert busy.value.answer == "retry"
    assert str(busy.value).startswith("Another holder (bob at the desk on ")
    assert f") is paying invoice #{approved.pk}; try again in " in str(busy.value)
    assert busy.value.message == (
        f"Another worker is paying invoice #{approved.pk}; this usually takes a few seconds."
    )
    assert paid_state(approved) == (Status.APPROVED, None, 0, [])
    assert payments.received == []
    assert payment_events(approved) == [("busy", 1)]


def test_redis_down_is_unavailable_and_nothing_is_written(approved, payments, alice, settings):
    settings.LOCK_REDIS_URL = dead_redis_url()
    with pytest.raises(LockServiceDown) as refused:
        pay_invoice(invoice=approved, actor=alice)
    assert refused.value.answer == "unavailable"
    assert paid_state(approved) == (Status.APPROVED, None, 0, [])
    assert payments.received == []


def service_down(stub):
    stub.status = 503  # an error page: whether it paid first, the answer does not say


def answers_without_a_reference(stub):
    paying = stub._kept

    def kept(call):
        paying(call)  # it pays, and then answers something we cannot read
        return HttpResponse(b'{"ok": true}', content_type="application/json")

    stub._kept = kept


def pays_and_answer_is_lost(stub):
    stub.lose_answer = lambda request: "close"  # it pays; the connection closes unanswered


@pytest.mark.parametrize(
    ("breaks", "reason"),
    [
        (service_down, "HTTP 503"),
        (answers_without_a_reference, "an answer without a payment reference"),
        (pays_and_answer_is_lost, "the connection was lost before the answer"),
    ],
    ids=["service-down", "no-reference", "answer-lost"],
)
def test_a_payment_whose_outcome_is_unknown_keeps_the_claim_is_recorded_and_paying_again_settles_it(
    approved, payments, alice, breaks, reason
):
    """The service may or may not have paid: the answer is "not known yet", never
    "nothing was saved"; the invoice stays claimed (it can no longer be voided), the
    attempt is recorded to be settled, and paying it again asks the service, which pays a
    key once."""
    working = payments._kept
    breaks(payments)
    with pytest.raises(OutcomeUnknown) as unknown:
        pay_invoice(invoice=approved, actor=alice)

    assert unknown.value.answer == "unknown"
    assert unknown.value.reason == reason
    assert unknown.value.message.startswith(
        f"The payment service did not say whether it acted ({reason})"
    )
    assert paid_state(approved) == (Status.APPROVED, 1, 0, [])
    assert payment_events(approved) == [("unknown", 1)]
    recorded = OutsideCall.objects.get()
    assert (recorded.idempotency_key, recorded.token) == (idempotency_key(approved.pk), 1)
    seen = Invoice.objects.get(pk=approved.pk).version
    with pytest.raises(PaymentSent):
        invoices.void_invoice(invoice=approved, seen=seen, reason="Oops", actor=alice)

    payments.status, payments._kept, payments.lose_answer = None, working, None
    settled = pay_invoice(invoice=approved, actor=alice)
    assert (settled.outcome, settled.token) == ("committed", 2)
    assert paid_state(approved)[:3] == (Status.PAID, 2, 2)
    assert len(payments.payments) == 1  # paid once, whatever it answered the first time
    assert [token for token, _status, _verdict in payment_calls(payments)] == [1, 2]


def test_a_payment_the_service_refuses_writes_nothing_and_gives_the_claim_back(
    approved, payments, alice
):
    """A 4xx is the service saying no: it paid nothing. Nothing is recorded to settle, and
    the invoice is approved as before its claim, so it may be voided or changed."""
    payments.status = 422
    with pytest.raises(CallFailed) as failed:
        pay_invoice(invoice=approved, actor=alice)

    assert (failed.value.answer, failed.value.reason) == ("upstream-failed", "HTTP 422")
    assert paid_state(approved) == (Status.APPROVED, None, 0, [])
    assert not OutsideCall.objects.exists()
    seen = Invoice.objects.get(pk=approved.pk).version
    invoices.void_invoice(invoice=approved, seen=seen, reason="Refused", actor=alice)
    assert Invoice.objects.get(pk=approved.pk).status == Status.VOID


def test_a_payment_made_then_unknown_is_recorded_after_the_insurance_lapsed(
    approved, payments, alice
):
    """The service paid and its answer was lost; then the vendor's insurance lapsed. What
    the service did is recorded whatever a rule checked before the call says now: the
    settling job asks again by the same key and records the payment, paid once."""
    payments.lose_answer = lambda request: "close"
    with pytest.raises(OutcomeUnknown):
        pay_invoice(invoice=approved, actor=alice)
    assert len(payments.payments) == 1  # it paid

    approved.vendor.contracts.update(insurance_expires_on=date.today() - timedelta(days=1))
    payments.lose_answer = None
    assert settle_outside_calls().settled == 1

    status, claim, fence, recorded = paid_state(approved)
    assert (status, claim, fence) == (Status.PAID, 2, 2)
    assert recorded == [(2, payment_reference(idempotency_key(approved.pk)))]
    assert len(payments.payments) == 1  # paid once
    call = OutsideCall.objects.get()
    assert (call.settlement, call.is_settled) == (OutsideCall.Settlement.DONE, True)
