"""Paying an approved vendor invoice, exactly once, under a fenced lease: the third fenced
operation (``vendor-payment:invoice:<id>``).

``pay_invoice`` reads top to bottom: the actor's permission, the payment service's URL (an
unset one refuses: no payment is ever skipped), the invoice's state and the vendor's
insurance, all before anything is locked; then one attempt's steps under the invoice's
lease (``hoa.fenced``, the runner every operation shares):

0. The runner's claim on the resource's record (``claim_fence``, committed on its own): a
   holder whose lease a newer one has claimed since stops here, and from now on no older
   holder can commit.
1. ``look``: the invoice and its payment; a paid invoice needs no call (already paid). The
   look names the invoice as the row it fenced: the runner refuses a token at or below
   the one it records, before any call.
2. ``claim``, committed by the runner on its own: one conditional ``UPDATE`` that marks the
   invoice as sent for payment (``payment_claim``, the lease's token) if it is still
   approved for the amount the look read and no newer holder claimed it. From then on the
   invoice cannot be voided, rejected or changed (``vendors.invoices``); a void that won
   the row first makes this attempt stop here, before the service hears of it
   (``InvoiceChangedBeforePaying``), and so does a newer holder's claim (superseded: a
   paused payer woken after its lease never calls).
3. ``call_outside``, after the runner's ``lease.check()``: one POST sealed for the
   ``payment`` endpoint, its ``Idempotency-Key`` the invoice's, its token the lease's; a
   refused one (it paid nothing) has the claim taken back (``release``).
4. ``fence_row`` and ``commit``, in one transaction: ``advance_fence`` on the invoice row (a
   holder whose lease was taken over: ``Superseded``), then the state check (a
   payment recorded by another holder: already paid), then the ``VendorPayment`` with the
   service's reference and the lease's token, the invoice paid, its timeline line.

Why money leaves once: the service pays a key at most once and refuses a token lower than
one it has seen; every try of an invoice carries the same key; the database records one
payment per invoice, under the fence. A holder paused inside its call whose payment went
through is overtaken by the next holder, whose call (a higher token) gets the same
payment's reference back and records it; the paused one is refused by the fence, and
leaves the payment it was told of to the settling job (``Payment.take_back``: the next
holder may stop before its call, its page out of date, and nothing else would record it
but a later payer). A holder that dies after its claim leaves the invoice "sent for
payment": paying it again (the page, the admin, the nightly batch) asks the service, which
answers with the payment it made, or pays now. docs/architecture.md, "Adding an
operation", has the argument in full.

``pay_together`` pays several invoices, each under its own lease, committed together
(``hoa.fenced.run_together``): the nightly ``pay_approved_invoices --all-orgs``.
"""

import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from hoa.answers.refusals import Refusal
from hoa.batch import together
from hoa.fenced import FencedSteps, Look, Result
from hoa.jobs.settling import SETTLE_VIA, Settled, settled_by
from hoa.models import OutsideCall, record_unknown
from locking import Lease, Outcome, StaleFencingToken
from vendors import invoice_answers
from vendors.exceptions import (
    InvoiceChanged,
    InvoiceChangedBeforePaying,
    InvoiceRefused,
    InvoiceRule,
    PaymentServiceNotConfigured,
)
from vendors.insurance import check_insured, today_of
from vendors.models import Invoice, InvoiceEvent, VendorPayment
from vendors.operations import PAYMENT, payment_resource
from vendors.payment_client import (
    PAYMENT_ENDPOINT,
    PAYMENT_SERVICE,
    PaymentReceipt,
    idempotency_key,
    send_payment,
)

logger = logging.getLogger(__name__)

Status = Invoice.Status


def pay_invoice(
    *, invoice: Invoice, actor, via: str = "", ip: str | None = None, seen: int | None = None
) -> Result:
    """Pay ``invoice`` (approved) exactly once, under its fenced lease.

    ``actor`` is the user asking (staff of the invoice's association with
    ``vendors.pay_invoice``, or a superuser), or ``None`` for the deployment's operator at
    the shell; ``via`` says where the request came from (``cli:ops``) for the audit trail.
    ``seen``: the invoice's version on the page that asked (the amount, vendor and
    approvals it showed). Paying is a compare-and-swap on it: an invoice changed in any way
    since then is ``InvoiceChanged`` (409, naming what it is now), never paid at an amount
    the person did not see. ``None`` (the nightly batch, the settling job): the invoice as
    the caller read it.

    Once the payment was sent (the invoice is claimed), the service may have paid: paying
    again asks it by the same key and records what it answers, whatever rule checked before
    the first call says now (the vendor's insurance may have lapsed since).

    Raises, before anything is locked: ``NotPermitted``, ``PaymentServiceNotConfigured``,
    ``InvoiceRefused`` (not approved), ``InvoiceChanged``, ``VendorNotInsured``. Under the
    lease, with nothing written: ``Busy``, ``LockServiceDown``, ``LeaseRanOut``,
    ``InvoiceChangedBeforePaying``, ``CallFailed``, ``Superseded``. All are ``Refusal``.
    """
    call, steps = _payment(invoice, actor, via=via, ip=ip, seen=seen)
    return call.run(steps)


def pay_together(invoices: list[Invoice], *, actor, via: str = "") -> list:
    """``pay_invoice`` for each invoice, committed together (``hoa.fenced.run_together``:
    each under its own lease, each told to the service on its own; one ``BEGIN`` and one
    ``COMMIT`` for all, or for as many as were paid while the first lease had half its time
    left). Return, in order, each one's ``Result`` or refusal (not raised)."""
    return together(invoices, lambda invoice: _payment(invoice, actor, via=via))


def _payment(invoice: Invoice, actor, *, via: str, ip: str | None = None, seen=None):
    """The permitted call and its steps, or the refusal made before the lease."""
    organization = invoice.organization
    resource = payment_resource(invoice.pk)
    call = PAYMENT.begin(actor, organization=organization, resource=resource, via=via, ip=ip)
    if not settings.VENDOR_PAYMENT_URL:
        raise PaymentServiceNotConfigured(invoice=invoice)
    if seen is not None and seen != invoice.version and invoice.status != Status.PAID:
        raise InvoiceChanged(invoice=invoice, seen=seen, current=invoice)  # since the page
    if invoice.status not in (Status.APPROVED, Status.PAID):
        raise InvoiceRefused(InvoiceRule.NOT_APPROVED, status=invoice.status)
    if invoice.status == Status.APPROVED and not invoice.is_claimed:
        # Before the first call only: once sent, recording what the service did depends on
        # no rule read before it.
        check_insured(invoice.vendor, organization, today_of(organization))
    return call, Payment(invoice=invoice, actor=actor, by=call.label, seen=seen)


@dataclass(frozen=True)
class InvoiceLook(Look):
    invoice: Invoice  # as the look read it (``fenced``): what the call tells the service
    payment: VendorPayment | None  # recorded by an earlier attempt


@dataclass(frozen=True)
class Payment(FencedSteps):
    """One attempt to pay ``invoice``, as the runner's steps (``hoa.fenced``)."""

    invoice: Invoice
    actor: object  # the user, or None for the operator at the shell
    by: str  # who asked, as the audit records it
    seen: int | None = None  # the version the page showed: the claim's compare-and-swap

    endpoint = PAYMENT_ENDPOINT
    party = PAYMENT_SERVICE

    @property
    def subject(self) -> dict:
        return {"invoice": self.invoice}

    def rows(self) -> QuerySet:
        return Invoice.objects.filter(pk=self.invoice.pk)

    def look(self, lease: Lease) -> InvoiceLook:
        invoice = self.rows().select_related("organization", "vendor").get()
        payment = VendorPayment.objects.filter(invoice=invoice).first()
        return InvoiceLook(
            invoice=invoice, payment=payment, needs_call=payment is None, fenced=invoice
        )

    def claim(self, lease: Lease, looked: InvoiceLook) -> bool:
        """Mark the invoice sent for payment (committed by the runner before the service
        hears of it) if it is still approved for the amount the look read and no newer
        holder claimed it; return whether it did. A paid invoice: ``False`` (the commit
        finds its payment). A newer holder's claim: ``StaleFencingToken``, before any call
        (this one was paused past its lease). Anything else refuses, nothing told."""
        seen, now = looked.invoice, timezone.now()
        unclaimed = Q(payment_claim__isnull=True) | Q(payment_claim__lte=lease.token)
        as_shown = Q(version=self.seen) if self.seen is not None else Q()
        claimed = (
            self.rows()
            .filter(unclaimed, as_shown, status=Status.APPROVED, amount=seen.amount)
            .update(payment_claim=lease.token, payment_claimed_at=now, version=F("version") + 1)
        )
        if not claimed:
            current = self.rows().select_related("vendor").get()
            if current.status == Status.PAID:
                return False
            if current.payment_claim is not None and current.payment_claim > lease.token:
                raise StaleFencingToken(lease.token, current.payment_claim)
            raise InvoiceChangedBeforePaying(invoice=self.invoice, current=current)
        InvoiceEvent.objects.create(
            invoice_id=seen.pk,
            kind=InvoiceEvent.Kind.PAYMENT_SENT,
            at=now,
            actor=self.actor,
            actor_label=self.by[:200],
            amount_after=seen.amount,
        )
        return True

    def call_outside(self, lease: Lease, looked: InvoiceLook) -> PaymentReceipt | None:
        return send_payment(invoice=looked.invoice, lease=lease)

    def release(self, lease: Lease, looked: InvoiceLook) -> None:
        """Take this attempt's claim back after the service refused to pay (a 4xx, or no
        connection: nothing was sent): the invoice is approved as before, and may be voided
        or changed. A newer holder's claim is left alone."""
        self.rows().filter(payment_claim=lease.token, status=Status.APPROVED).update(
            payment_claim=None, payment_claimed_at=None, version=F("version") + 1
        )

    def fence_row(self, looked: InvoiceLook) -> QuerySet:
        return self.rows()

    def commit(self, lease: Lease, looked: InvoiceLook, told: PaymentReceipt | None) -> Result:
        # The fence UPDATE holds the invoice's row lock: what is read now is the latest
        # committed state, and nobody changes it before we commit.
        payment = VendorPayment.objects.filter(invoice_id=self.invoice.pk).first()
        if payment is not None:  # another holder recorded it: the service paid once
            payment.invoice = looked.invoice
            return Result(
                Outcome.ALREADY_DONE, lease.token, payment, invoice_answers.payment_message
            )
        now = timezone.now()
        invoice = looked.invoice
        # Claimed (by this attempt or a newer one) and approved: nothing else moves it.
        if told is None or not self.rows().filter(status=Status.APPROVED).update(
            status=Status.PAID, version=F("version") + 1
        ):
            raise InvoiceChangedBeforePaying(invoice=self.invoice, current=self.rows().get())
        payment = VendorPayment.objects.create(
            invoice=invoice,
            amount=invoice.amount,
            currency=settings.CURRENCY,
            reference=told.reference,
            paid_at=now,
            paid_by=self.actor,
            actor_label=self.by[:200],
            fence_token=lease.token,
        )
        InvoiceEvent.objects.create(
            invoice_id=invoice.pk,
            kind=InvoiceEvent.Kind.PAID,
            at=now,
            actor=self.actor,
            actor_label=self.by[:200],
            from_status=Status.APPROVED,
            to_status=Status.PAID,
            note=told.reference,
            amount_after=invoice.amount,
        )
        invoice.status = Status.PAID
        logger.info(
            "invoice paid",
            extra={"invoice": invoice.pk, "token": lease.token, "reference": told.reference},
        )
        return Result(Outcome.COMMITTED, lease.token, payment, invoice_answers.payment_message)

    def take_back(self, lease: Lease, looked: InvoiceLook, refusal: Refusal) -> str:
        """A payment is not taken back: the service paid (now, or before, by the same key)
        and this attempt's commit was refused, most often by the fence of a newer holder,
        which may stop before its own call (its page was out of date, its lease ran out).
        The payment is left to the settling job, which records it by the same key, as an
        unknown outcome is: the invoice's money is never out with nothing left to record
        it but the next payer."""
        invoice = looked.invoice
        try:
            if VendorPayment.objects.filter(invoice_id=invoice.pk).exists():
                return "recorded by another attempt"  # the newer holder's call recorded it
            with transaction.atomic():  # a savepoint inside run_together's transaction
                record_unknown(
                    operation=PAYMENT.name,
                    resource=payment_resource(invoice.pk),
                    endpoint=PAYMENT_ENDPOINT,
                    idempotency_key=idempotency_key(invoice.pk),
                    token=lease.token,
                    organization=invoice.organization,
                    reason="paid; its record was refused at the commit",
                    actor=self.by,
                )
        except DatabaseError as exc:
            logger.error(
                "a payment made and not recorded could not be left to settle",
                extra={"invoice": invoice.pk, "token": lease.token},
                exc_info=True,
            )
            return f"not left to settle: {exc.__class__.__name__}"
        return "left to settle by the same key"


def settle_unknown(call: OutsideCall) -> Settled:
    """Settle a payment whose outcome was unknown: ask the service again by the invoice's
    key (it answers with the payment it made, or pays now, or refuses), and record it."""
    invoice = (
        Invoice.objects.select_related("organization", "vendor")
        .filter(pk=PAYMENT.resource.fullmatch(call.resource)["invoice"])
        .first()
    )
    if invoice is None:
        return None  # an invoice is never deleted once sent; an operator looks
    return settled_by(lambda: pay_invoice(invoice=invoice, actor=None, via=SETTLE_VIA))
