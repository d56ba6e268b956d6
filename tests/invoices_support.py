"""Helpers shared by the tests of invoices, their approval and their payment: fixtures, a
billed assignment, an invoice recorded and approved through the workflow, and what a
refused change must leave as it was."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from hoa.models import Complaint, Organization, StaffMembership
from vendors import invoices
from vendors.models import Invoice, InvoiceApproval, InvoiceEvent, Vendor, VendorAssignment
from vendors.payment_client import PAYMENT_ENDPOINT

AMOUNT = Decimal("250.00")  # below the default threshold: one approval
LARGE = Decimal("4800.00")  # above it: two approvals
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


def issued_on() -> date:
    return timezone.localdate() - timedelta(days=3)


def due_on() -> date:
    return timezone.localdate() + timedelta(days=27)


@pytest.fixture
def bob(django_user_model, maple, staff_permissions):
    """A second member of Maple Court's staff: the second approver."""
    user = django_user_model.objects.create_user(username="bob", password="pw-bob")
    user.is_staff = True
    user.save()
    user.groups.add(staff_permissions)
    StaffMembership.objects.create(user=user, organization=maple)
    return user


@pytest.fixture
def carol(django_user_model, maple, staff_permissions):
    """A third member of Maple Court's staff."""
    user = django_user_model.objects.create_user(username="carol", password="pw-carol")
    user.is_staff = True
    user.save()
    user.groups.add(staff_permissions)
    StaffMembership.objects.create(user=user, organization=maple)
    return user


def assignment_of(organization: Organization, vendor: Vendor, title: str = "Leaking pipe"):
    """An assignment of ``vendor`` to a new complaint of ``organization`` (written as the
    fenced assignment would have: token 1, the complaint's fence at 1)."""
    complaint = Complaint.objects.create(organization=organization, title=title)
    Complaint.objects.filter(pk=complaint.pk).update(last_fence_token=1)
    return VendorAssignment.objects.create(complaint=complaint, vendor=vendor, fence_token=1)


@pytest.fixture
def assignment(maple, pipe) -> VendorAssignment:
    """Pipe Pros sent to a complaint of Maple Court."""
    return assignment_of(maple, pipe)


def pdf_upload(content: bytes = PDF, name: str = "invoice.pdf") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/pdf")


def record(assignment, actor, *, number="INV-100", amount=AMOUNT, **values) -> Invoice:
    """An invoice of ``assignment`` recorded through the workflow by ``actor``."""
    change = invoices.record_invoice(
        assignment=assignment,
        number=number,
        amount=amount,
        issued_on=values.pop("issued_on", issued_on()),
        due_on=values.pop("due_on", due_on()),
        actor=actor,
        **values,
    )
    return change.invoice


def approve(invoice: Invoice, actor, **options) -> Invoice:
    """``actor`` approves ``invoice`` as it is in the database now."""
    invoice.refresh_from_db()
    return invoices.approve_invoice(
        invoice=invoice, seen=invoice.version, actor=actor, **options
    ).invoice


def approved_invoice(assignment, recorder, approver, **values) -> Invoice:
    invoice = record(assignment, recorder, **values)
    return approve(invoice, approver)


def state_of(invoice: Invoice) -> tuple:
    """What a change writes: ``(status, version, amount, standing approvers, events)``."""
    invoice.refresh_from_db()
    approvers = InvoiceApproval.objects.filter(invoice=invoice, voided_at__isnull=True)
    events = InvoiceEvent.objects.filter(invoice=invoice)
    return (
        invoice.status,
        invoice.version,
        invoice.amount,
        sorted(approvers.values_list("approver__username", flat=True)),
        events.count(),
    )


def timeline(invoice: Invoice) -> list[tuple]:
    """The invoice's timeline, oldest first: ``(kind, actor, from, to, note)``."""
    rows = InvoiceEvent.objects.filter(invoice=invoice).order_by("at", "pk")
    return list(rows.values_list("kind", "actor_label", "from_status", "to_status", "note"))


@pytest.fixture
def payments(http_stub, settings):
    """The payment service, pointed at the stand-in (which pays a key once)."""
    settings.VENDOR_PAYMENT_URL = http_stub.url_for(PAYMENT_ENDPOINT)
    return http_stub


@pytest.fixture
def approved(assignment, alice, bob) -> Invoice:
    """Pipe Pros's invoice of 250.00, recorded by alice and approved by bob."""
    return approve(record(assignment, alice, number="PAY-1"), bob)


def paid_keys(stub) -> list[tuple[str, int]]:
    """What the stand-in payment service paid: ``(idempotency key, token)``, in order."""
    return [(paid.idempotency_key, paid.token) for paid in stub.payments]


def payment_calls(stub) -> list[tuple[int, int, str]]:
    """The payment calls the stand-in received: ``(token, status, verdict)``, in order."""
    return [
        (request.token, request.status, request.verdict)
        for request in stub.received
        if request.idempotency_key.startswith("vendor-payment:")
    ]


def payment_events(invoice: Invoice) -> list[tuple[str, int | None]]:
    """The audit's ``(outcome, token)`` of the invoice's payment attempts, oldest first."""
    from locking.models import FenceEvent
    from vendors.operations import payment_resource

    rows = FenceEvent.objects.filter(resource=payment_resource(invoice.pk)).order_by("at", "id")
    return list(rows.values_list("outcome", "token"))


def paid_state(invoice: Invoice) -> tuple:
    """What a payment writes: ``(status, claim, fence, payments as (token, reference))``."""
    from vendors.models import VendorPayment

    invoice.refresh_from_db()
    recorded = VendorPayment.objects.filter(invoice=invoice).order_by("pk")
    return (
        invoice.status,
        invoice.payment_claim,
        invoice.last_fence_token,
        list(recorded.values_list("fence_token", "reference")),
    )
