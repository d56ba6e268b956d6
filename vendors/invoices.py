"""The invoice workflow: record a vendor's invoice, change its amount, approve, reject, void.

Each change is a plain transaction: one conditional ``UPDATE … WHERE version = <seen>`` (the
status and the payment's claim checked in it), then the change and its timeline event under
that row lock; the loser is told what it is now (``InvoiceChanged``, 409). Paying is the
fenced ``vendors.payments``. The rules for people: docs/staff-guide.md, "Recording an
invoice" to "Rejecting, voiding, paying".
"""

import hashlib
import logging
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from hoa.answers.table import Answer
from hoa.models import Organization
from hoa.security.audit import Reason, record_denial
from vendors import approvals, invoice_answers
from vendors.exceptions import (
    DuplicateInvoiceNumber,
    InvoiceChanged,
    InvoiceNotAllowed,
    InvoiceRefused,
    InvoiceRule,
    PaymentSent,
)
from vendors.models import (
    ApprovalPolicy,
    Invoice,
    InvoiceApproval,
    InvoiceDocument,
    InvoiceEvent,
    VendorAssignment,
)
from vendors.models.invoices import MAX_AMOUNT

logger = logging.getLogger(__name__)

Status = Invoice.Status
Kind = InvoiceEvent.Kind
NUMBER_MAX_LENGTH = 64
REASON_MAX_LENGTH = 2000
PDF_MAGIC = b"%PDF-"

RECORD_PERMISSION = "vendors.add_invoice"
CHANGE_PERMISSION = "vendors.change_invoice"
APPROVE_PERMISSION = "vendors.approve_invoice"
VOID_PERMISSION = "vendors.void_invoice"


@dataclass(frozen=True)
class InvoiceChange:
    """What a change of the workflow did: the invoice as it is now, and its timeline line."""

    invoice: Invoice
    event: InvoiceEvent

    @property
    def answer(self) -> Answer:
        return Answer.DONE

    @property
    def message(self) -> str:
        return invoice_answers.change_message(self.invoice, self.event)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Pdf:
    """An invoice's PDF, checked (``read_pdf``)."""

    filename: str
    content: bytes


def read_pdf(upload) -> Pdf:
    """Read an uploaded file (Django's ``UploadedFile``) as an invoice's PDF, or raise
    ``InvoiceRefused``: at most 10 MB, and a PDF by its content (it starts with ``%PDF-``
    and ends with its ``%%EOF`` marker), whatever its name or declared type says."""
    if upload.size > InvoiceDocument.MAX_BYTES:
        raise InvoiceRefused(InvoiceRule.PDF_TOO_LARGE, limit=InvoiceDocument.MAX_BYTES)
    content = b"".join(upload.chunks())
    if len(content) > InvoiceDocument.MAX_BYTES:  # the declared size may lie
        raise InvoiceRefused(InvoiceRule.PDF_TOO_LARGE, limit=InvoiceDocument.MAX_BYTES)
    if not content.startswith(PDF_MAGIC) or b"%%EOF" not in content[-1024:]:
        raise InvoiceRefused(InvoiceRule.NOT_A_PDF)
    name = (upload.name or "invoice.pdf").rsplit("/", 1)[-1].rsplit("\\", 1)[-1]
    return Pdf(filename=name[:200] or "invoice.pdf", content=content)


# -- recording --------------------------------------------------------------------------------


def record_invoice(
    *,
    assignment: VendorAssignment,
    number: str,
    amount: Decimal,
    issued_on: date,
    due_on: date,
    actor,
    pdf: Pdf | None = None,
) -> InvoiceChange:
    """Record what ``assignment``'s vendor billed for it: received, with a timeline line;
    flagged as a possible duplicate of an earlier invoice of the same vendor, amount and
    date. Raises ``InvoiceRefused`` (bad values), ``DuplicateInvoiceNumber``,
    ``InvoiceNotAllowed``; nothing is written then."""
    organization = assignment.complaint.organization
    _allowed(actor, organization, RECORD_PERMISSION, "record")
    number = _checked_number(number)
    _check_amount(amount)
    check_dates(issued_on, due_on)
    vendor = assignment.vendor
    now = timezone.now()
    with transaction.atomic():
        # "Not a second copy of one bill" is a rule over the vendor's invoices: decided
        # under their one lock, so two copies recorded at once do not both go unflagged.
        Invoice.objects.lock_duplicates_of(organization_id=organization.pk, vendor_id=vendor.pk)
        _refuse_taken_number(organization, vendor, number)
        invoice = Invoice(
            organization=organization,
            assignment=assignment,
            vendor=vendor,
            number=number,
            amount=amount,
            issued_on=issued_on,
            due_on=due_on,
            recorded_at=now,
            recorded_by=actor,
        )
        invoice.possible_duplicate_of = _possible_duplicate(invoice)
        try:
            with transaction.atomic():  # a savepoint: the number's race is answered below
                invoice.save(force_insert=True)
        except IntegrityError:
            _refuse_taken_number(organization, vendor, number)  # taken meanwhile
            raise
        if pdf is not None:
            _store_pdf(invoice, pdf, now)
        event = _event(invoice, Kind.RECORDED, actor, now, to_status=Status.RECEIVED)
        event.amount_after = amount
        event.save(force_insert=True)
    logger.info(
        "invoice recorded",
        extra={"invoice": invoice.pk, "organization": organization.pk, "actor": actor.pk},
    )
    return InvoiceChange(invoice, event)


def _refuse_taken_number(organization: Organization, vendor, number: str) -> None:
    taken = (
        Invoice.objects.filter(organization=organization, vendor=vendor, number__iexact=number)
        .exclude(status=Status.VOID)
        .first()
    )
    if taken is not None:
        raise DuplicateInvoiceNumber(vendor=vendor, number=number, existing=taken)


def _possible_duplicate(invoice: Invoice) -> Invoice | None:
    """The earliest other invoice of the same vendor, amount and date in the association,
    with another number, that is not void: the one this may be a copy of."""
    same = Invoice.objects.filter(
        organization_id=invoice.organization_id,
        vendor_id=invoice.vendor_id,
        amount=invoice.amount,
        issued_on=invoice.issued_on,
    ).exclude(status=Status.VOID)
    if invoice.pk is not None:
        same = same.exclude(pk=invoice.pk)
    return same.order_by("pk").first()


def _store_pdf(invoice: Invoice, pdf: Pdf, now) -> None:
    InvoiceDocument.objects.create(
        invoice=invoice,
        filename=pdf.filename,
        content=pdf.content,
        size=len(pdf.content),
        sha256=hashlib.sha256(pdf.content).hexdigest(),
        uploaded_at=now,
    )


# -- the changes ------------------------------------------------------------------------------


def approve_invoice(
    *, invoice: Invoice, seen: int, actor, confirm_not_duplicate: bool = False
) -> InvoiceChange:
    """Approve ``invoice`` as ``actor``, who saw its version ``seen``: the invoice is
    approved once it has the approvals the association's threshold asks for."""
    organization = invoice.organization
    _allowed(actor, organization, APPROVE_PERMISSION, "approve")
    now = timezone.now()
    with transaction.atomic():
        current = _take(invoice, seen, allowed=(Status.RECEIVED,), action="approve")
        confirming = current.needs_duplicate_confirmation
        if confirming and not confirm_not_duplicate:
            raise InvoiceRefused(
                InvoiceRule.CONFIRM_NOT_DUPLICATE, other=current.possible_duplicate_of
            )
        given = list(current.approvals.standing().select_related("approver").order_by("pk"))
        state = approvals.standing(current, ApprovalPolicy.of(organization), given)
        if broken := state.refusal(actor.pk):
            raise InvoiceRefused(broken)
        InvoiceApproval.objects.create(
            invoice=current, approver=actor, amount=current.amount, at=now
        )
        changed = []
        if confirming:
            current.duplicate_confirmed_by, current.duplicate_confirmed_at = actor, now
            changed += ["duplicate_confirmed_by", "duplicate_confirmed_at"]
            _event(current, Kind.DUPLICATE_CONFIRMED, actor, now).save(force_insert=True)
        approved = state.given + 1 >= state.needed
        if approved:
            current.status = Status.APPROVED
            changed.append("status")
        if changed:
            current.save(update_fields=changed)
        event = _event(
            current,
            Kind.APPROVED,
            actor,
            now,
            from_status=Status.RECEIVED if approved else "",
            to_status=Status.APPROVED if approved else "",
        )
        event.amount_after = current.amount
        event.save(force_insert=True)
    return InvoiceChange(current, event)


def change_amount(
    *, invoice: Invoice, seen: int, amount: Decimal, reason: str, actor
) -> InvoiceChange:
    """Change the amount of a received or approved invoice: its standing approvals are
    voided and it is received again; the duplicate flag is worked out anew."""
    _allowed(actor, invoice.organization, CHANGE_PERMISSION, "change")
    _check_amount(amount)
    reason = _checked_reason(reason, "change")
    now = timezone.now()
    with transaction.atomic():
        # Before the row: the order ``record_invoice`` takes them in (the duplicate flag's
        # lock, then invoice rows). An invoice's association and vendor never change.
        Invoice.objects.lock_duplicates_of(
            organization_id=invoice.organization_id, vendor_id=invoice.vendor_id
        )
        current = _take(invoice, seen, allowed=Invoice.OWED_STATUSES, action="change")
        if amount == current.amount:
            raise InvoiceRefused(InvoiceRule.AMOUNT_UNCHANGED, amount=amount)
        before, status_before = current.amount, current.status
        voided = current.approvals.standing().update(voided_at=now)
        current.amount, current.status = amount, Status.RECEIVED
        current.possible_duplicate_of = _possible_duplicate(current)
        current.duplicate_confirmed_by = current.duplicate_confirmed_at = None
        current.save(
            update_fields=[
                "amount",
                "status",
                "possible_duplicate_of",
                "duplicate_confirmed_by",
                "duplicate_confirmed_at",
            ]
        )
        event = _event(
            current,
            Kind.AMOUNT_CHANGED,
            actor,
            now,
            note=reason,
            from_status=status_before if status_before != Status.RECEIVED else "",
            to_status=Status.RECEIVED if status_before != Status.RECEIVED else "",
        )
        event.amount_before, event.amount_after = before, amount
        event.save(force_insert=True)
    logger.info(
        "invoice amount changed",
        extra={"invoice": current.pk, "approvals_voided": voided, "actor": actor.pk},
    )
    return InvoiceChange(current, event)


def reject_invoice(*, invoice: Invoice, seen: int, reason: str, actor) -> InvoiceChange:
    """Reject a received or approved invoice (the association disputes it); final."""
    return _close(invoice, seen, reason, actor, to=Status.REJECTED, kind=Kind.REJECTED)


def void_invoice(*, invoice: Invoice, seen: int, reason: str, actor) -> InvoiceChange:
    """Void a received or approved invoice (recorded by mistake, or withdrawn); final.
    Refused once a payment was sent for it (``PaymentSent``)."""
    return _close(invoice, seen, reason, actor, to=Status.VOID, kind=Kind.VOIDED)


def _close(invoice, seen, reason, actor, *, to: str, kind: str) -> InvoiceChange:
    action = "reject" if to == Status.REJECTED else "void"
    _allowed(actor, invoice.organization, VOID_PERMISSION, action)
    reason = _checked_reason(reason, action)
    now = timezone.now()
    with transaction.atomic():
        current = _take(invoice, seen, allowed=Invoice.OWED_STATUSES, action=action)
        before = current.status
        current.status = to
        current.save(update_fields=["status"])
        event = _event(current, kind, actor, now, note=reason, from_status=before, to_status=to)
        event.save(force_insert=True)
    return InvoiceChange(current, event)


def _take(invoice: Invoice, seen: int, *, allowed: tuple, action: str) -> Invoice:
    """The compare-and-swap: bump the version if it is still ``seen``, the status one of
    ``allowed`` and no payment has claimed the invoice; return the row as it is now, its
    lock held until the commit. Otherwise raise what stands in the way, nothing written."""
    rows = Invoice.objects.filter(pk=invoice.pk)
    bumped = rows.filter(version=seen, status__in=allowed, payment_claim__isnull=True).update(
        version=F("version") + 1
    )
    current = rows.select_related("organization", "vendor", "recorded_by").get()
    if bumped:
        return current
    if current.is_claimed and not current.is_final:
        raise PaymentSent(invoice=current)
    if current.version != seen:
        raise InvoiceChanged(invoice=invoice, seen=seen, current=current)
    raise InvoiceRefused(InvoiceRule.NOT_FROM_HERE, status=current.status, action=action)


def _event(invoice: Invoice, kind: str, actor, at, *, note="", from_status="", to_status=""):
    return InvoiceEvent(
        invoice=invoice,
        kind=kind,
        at=at,
        actor=actor,
        actor_label=actor.get_username() if actor is not None else "",
        note=note,
        from_status=from_status,
        to_status=to_status,
    )


# -- checks -----------------------------------------------------------------------------------


def _allowed(actor, organization: Organization, permission: str, action: str) -> None:
    """Staff of ``organization`` with ``permission``, or a superuser; else the refusal is
    recorded as an ``AccessDenial`` and raised."""
    if organization.has_staff(actor) and actor.has_perm(permission):
        return
    record_denial(
        reason=Reason.PERMISSION,
        note=f"{action} invoices: not staff of {organization.slug} with {permission}",
        resource=f"invoices:{organization.slug}",
        actor=actor.get_username(),
        organization=organization,
    )
    raise InvoiceNotAllowed(actor=actor.get_username(), organization=organization, action=action)


def _checked_number(number: str) -> str:
    number = (number or "").strip()
    if not number:
        raise InvoiceRefused(InvoiceRule.NUMBER_REQUIRED)
    if len(number) > NUMBER_MAX_LENGTH:
        raise InvoiceRefused(InvoiceRule.NUMBER_TOO_LONG, max=NUMBER_MAX_LENGTH)
    return number


def _check_amount(amount: Decimal) -> None:
    if not amount.is_finite() or amount <= 0:
        raise InvoiceRefused(InvoiceRule.AMOUNT_NOT_POSITIVE)
    if amount > MAX_AMOUNT:
        raise InvoiceRefused(InvoiceRule.AMOUNT_TOO_LARGE, max=MAX_AMOUNT)
    if amount != amount.quantize(Decimal("0.01")):
        raise InvoiceRefused(InvoiceRule.AMOUNT_CENTS)


# How far from today an invoice date may be, and a due date from its invoice date: wider
# than any real bill, narrow enough that 1900-01-01 or 9999-12-31 is caught as the typo it is.
ISSUED_YEARS_BACK = 10
ISSUED_YEARS_AHEAD = DUE_YEARS_AFTER_ISSUED = 1


def check_dates(issued_on: date | None, due_on: date | None) -> None:
    """Refuse an invoice date more than ten years back or a year ahead of today, and a due
    date before the invoice date or more than a year after it (``InvoiceRefused``, the
    range in its sentence). A missing date is left to the form's "required"."""
    today = timezone.localdate()
    if issued_on is not None:
        earliest = _years_from(today, -ISSUED_YEARS_BACK)
        latest = _years_from(today, ISSUED_YEARS_AHEAD)
        if not earliest <= issued_on <= latest:
            raise InvoiceRefused(InvoiceRule.ISSUED_OUT_OF_RANGE, earliest=earliest, latest=latest)
    if issued_on is not None and due_on is not None:
        if due_on < issued_on:
            raise InvoiceRefused(InvoiceRule.DUE_BEFORE_ISSUED, issued_on=issued_on)
        latest = _years_from(issued_on, DUE_YEARS_AFTER_ISSUED)
        if due_on > latest:
            raise InvoiceRefused(InvoiceRule.DUE_OUT_OF_RANGE, earliest=issued_on, latest=latest)


def _years_from(day: date, years: int) -> date:
    try:
        return day.replace(year=day.year + years)
    except ValueError:  # February 29th, in a year without one
        return day.replace(year=day.year + years, day=28)


def _checked_reason(reason: str, action: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise InvoiceRefused(InvoiceRule.SAY_WHY, action=action)
    if len(reason) > REASON_MAX_LENGTH:
        raise InvoiceRefused(InvoiceRule.REASON_TOO_LONG, max=REASON_MAX_LENGTH)
    return reason
