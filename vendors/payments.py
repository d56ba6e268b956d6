"""Paying an approved vendor invoice exactly once (``pay_invoice``, ``pay_together``), and
its steps under the invoice's lease (``Payment``): the look, the invoice's claim before the
service hears of it, the call, the commit. docs/architecture.md, "Why money leaves once".
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
    PaymentReceipt,
    idempotency_key,
    send_payment,
)

logger = logging.getLogger(__name__)

Status = Invoice.Status


def pay_invoice(
    *, invoice: Invoice, actor, via: str = "", ip: str | None = None, seen: int | None = None
) -> Result:
    """Pay ``invoice`` (approved) exactly once, under its fenced lease, as ``actor`` (staff
    with ``vendors.pay_invoice``; ``None``: the operator at the shell) from ``via``.

    ``seen``, the invoice's version on the page that asked, makes paying a compare-and-swap:
    an invoice changed since then is ``InvoiceChanged`` (409), never paid at an amount the
    person did not see (``None``: the batch's own read). Once sent (claimed), paying again
    asks the service by the same key and records its answer, whatever the rules read before
    the first call say now. Every refusal is a ``Refusal``, with nothing written.
    """
    call, steps = _payment(invoice, actor, via=via, ip=ip, seen=seen)
    return call.run(steps)


def pay_together(invoices: list[Invoice], *, actor, via: str = "") -> list:
    """``pay_invoice`` for each invoice, each under its own lease, committed together
    (``hoa.batch.together``); each one's ``Result`` or refusal, in order."""
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

    def claim(self, lease: Lease, found: InvoiceLook) -> bool:
        """Mark the invoice sent for payment (committed by the runner before the service
        hears of it) if it is still approved for the amount the look read and no newer
        holder claimed it; return whether it did. A paid invoice: ``False`` (the commit
        finds its payment). A newer holder's claim: ``StaleFencingToken``, before any call
        (this one was paused past its lease). Anything else refuses, nothing told."""
        seen, now = found.invoice, timezone.now()
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
        self._event(seen, InvoiceEvent.Kind.PAYMENT_SENT, now)
        return True

    def _event(self, invoice: Invoice, kind, now, **fields) -> None:
        """The invoice's timeline line of this attempt."""
        actor, label = self.actor, self.by[:200]
        InvoiceEvent.objects.create(
            invoice_id=invoice.pk, kind=kind, at=now, actor=actor, actor_label=label,
            amount_after=invoice.amount, **fields,
        )  # fmt: skip

    def call_outside(self, lease: Lease, found: InvoiceLook) -> PaymentReceipt | None:
        return send_payment(invoice=found.invoice, lease=lease)

    def release(self, lease: Lease, found: InvoiceLook) -> None:
        """Take this attempt's claim back after the service refused to pay (a 4xx, or no
        connection: nothing was sent): the invoice is approved as before, and may be voided
        or changed. A newer holder's claim is left alone."""
        self.rows().filter(payment_claim=lease.token, status=Status.APPROVED).update(
            payment_claim=None, payment_claimed_at=None, version=F("version") + 1
        )

    def commit(self, lease: Lease, found: InvoiceLook, receipt: PaymentReceipt | None) -> Result:
        # The fence UPDATE holds the invoice's row lock: what is read now is the latest
        # committed state, and nobody changes it before we commit.
        payment = VendorPayment.objects.filter(invoice_id=self.invoice.pk).first()
        if payment is not None:  # another holder recorded it: the service paid once
            payment.invoice = found.invoice
            return Result(
                Outcome.ALREADY_DONE, lease.token, payment, invoice_answers.payment_message
            )
        now = timezone.now()
        invoice = found.invoice
        # Claimed (by this attempt or a newer one) and approved: nothing else moves it.
        if receipt is None or not self.rows().filter(status=Status.APPROVED).update(
            status=Status.PAID, version=F("version") + 1
        ):
            raise InvoiceChangedBeforePaying(invoice=self.invoice, current=self.rows().get())
        payment = VendorPayment.objects.create(
            invoice=invoice,
            amount=invoice.amount,
            currency=settings.CURRENCY,
            reference=receipt.reference,
            paid_at=now,
            paid_by=self.actor,
            actor_label=self.by[:200],
            fence_token=lease.token,
        )
        paid = {"from_status": Status.APPROVED, "to_status": Status.PAID, "note": receipt.reference}
        self._event(invoice, InvoiceEvent.Kind.PAID, now, **paid)
        invoice.status = Status.PAID
        logger.info(
            "invoice paid",
            extra={"invoice": invoice.pk, "token": lease.token, "reference": receipt.reference},
        )
        return Result(Outcome.COMMITTED, lease.token, payment, invoice_answers.payment_message)

    def take_back(self, lease: Lease, found: InvoiceLook, refusal: Refusal) -> str:
        """A payment is not taken back: the service paid and this attempt's commit was
        refused (a newer holder's fence, which may stop before its own call). It is left to
        the settling job, which records it by the same key, as an unknown outcome is."""
        invoice = found.invoice
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
