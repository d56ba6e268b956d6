"""The vendors' part of the demo data (``manage.py seed_demo``). Idempotent.

Contracts with current, past and future windows, with their insurance certificates (one
lapsing within 30 days, one lapsed under a current contract); and, for an association none
of whose complaints has a vendor yet, insured vendors assigned to some of its older open
complaints through the fenced service (real tokens, recorded attempts), half of those then
in progress.
"""

from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from hoa.complaints import workflow
from hoa.models import Complaint, Organization, StaffMembership
from vendors import invoices
from vendors.models import (
    Invoice,
    InvoiceEvent,
    Vendor,
    VendorAssignment,
    VendorContract,
    VendorPayment,
)
from vendors.services import assign_vendor

ASSIGNED_PER_ASSOCIATION = 10


def seed_demo(organizations: dict[str, Organization]) -> None:
    """Vendors under contract with the demo associations: current, past and future windows;
    then some of their open complaints assigned."""
    today = timezone.localdate()
    year, day = timedelta(days=365), timedelta(days=1)
    # name, trade, associations, contract from and to, insurance certificate until
    vendors = [
        ("Pipe Pros Plumbing", "plumbing", ["maple-court", "oak-ridge"], -year, year, year),
        ("Evergreen Landscaping", "landscaping", ["maple-court"], -year, year, 20 * day),
        ("Bright Spark Electric", "electrical", ["maple-court"], -2 * year, -year, -year),
        # Under contract, but its certificate lapsed: it cannot be assigned or paid.
        ("Keystone Masonry", "masonry", ["maple-court"], -year, year, -12 * day),
        ("Summit Roofing", "roofing", ["oak-ridge"], 30 * day, year, year),
        ("Oakline Handyman", "general", ["oak-ridge"], -year, year, year),
    ]
    for name, trade, slugs, starts, ends, insured in vendors:
        vendor, _ = Vendor.objects.get_or_create(name=name, defaults={"trade": trade})
        for slug in slugs:
            if slug in organizations:
                VendorContract.objects.get_or_create(
                    vendor=vendor,
                    organization=organizations[slug],
                    defaults={
                        "starts_on": today + starts,
                        "ends_on": today + ends,
                        "insurance_expires_on": today + insured,
                    },
                )
    for organization in organizations.values():
        _assign_some(organization)


def _assign_some(organization: Organization) -> None:
    if VendorAssignment.objects.filter(complaint__organization=organization).exists():
        return  # assigned before (by a previous run, or by someone trying the demo)
    member = (
        StaffMembership.objects.filter(organization=organization)
        .select_related("user")
        .order_by("user__username")
        .first()
    )
    today = timezone.localdate()
    contracted = [
        contract.vendor
        for contract in VendorContract.objects.active_on(today)
        .filter(organization=organization, insurance_expires_on__gte=today)
        .select_related("vendor")
        .order_by("vendor__name")
    ]
    if member is None or not contracted:
        return
    # Every third of the open complaints opened more than two days ago, oldest first.
    older = (
        Complaint.objects.for_organization(organization)
        .filter(status=Complaint.Status.OPEN, opened_at__lt=timezone.now() - timedelta(days=2))
        .order_by("opened_at", "pk")
    )
    for n, complaint in enumerate(list(older)[::3][:ASSIGNED_PER_ASSOCIATION]):
        vendor = contracted[n % len(contracted)]
        assign_vendor(complaint=complaint, vendor=vendor, actor=member.user, via="seed_demo")
        if n % 2:
            complaint.refresh_from_db()
            workflow.change_status(
                complaint=complaint,
                seen=Complaint.Status.ASSIGNED,
                to=Complaint.Status.IN_PROGRESS,
                note="",
                actor=member.user,
                assigned=True,
            )


def seed_invoices(organizations: dict[str, Organization]) -> None:
    """Invoices of the demo associations' assignments in every state, recorded and changed
    through the workflow (so each has its timeline): received, overdue, approved once of
    two, approved, paid, rejected, void, and a possible duplicate awaiting confirmation."""
    for organization in organizations.values():
        if Invoice.objects.filter(organization=organization).exists():
            continue  # seeded before (or invoices recorded by someone trying the demo)
        staff = list(
            StaffMembership.objects.filter(organization=organization)
            .select_related("user")
            .order_by("user__username")
        )
        assignments = list(
            VendorAssignment.objects.filter(complaint__organization=organization)
            .select_related("vendor", "complaint")
            .order_by("pk")
        )
        if len(staff) < 2 or not assignments:
            continue
        # One person records, others approve: the association's rule by default (the
        # person who records an invoice may not approve it).
        recorder, approvers = staff[0].user, [member.user for member in staff[1:]]
        _seed_invoices_of(organization, assignments, recorder, approvers, invoices)


def _seed_invoices_of(organization, assignments, recorder, approvers, invoices) -> None:
    approver = approvers[0]
    today = timezone.localdate()
    # number, amount, issued (days ago), due in (days), what becomes of it
    plan = [
        ("INV-1041", "185.00", 12, 18, "received"),
        ("INV-1042", "420.00", 45, -15, "received"),  # overdue
        ("INV-1043", "2350.00", 9, 21, "approved-once"),  # above the threshold: one of two
        ("INV-1044", "640.00", 20, 10, "approved"),
        ("INV-1045", "310.00", 30, 0, "paid"),
        ("INV-1046", "95.00", 25, 5, "rejected"),
        ("INV-1047", "150.00", 15, 15, "void"),
        ("INV-1048", "185.00", 12, 18, "received"),  # same vendor, amount, date as INV-1041
    ]
    first = assignments[0]
    for index, (number, amount, issued, due, becomes) in enumerate(plan):
        # The possible duplicate bills the same assignment as the invoice it repeats.
        repeats = number in ("INV-1041", "INV-1048")
        assignment = first if repeats else assignments[index % len(assignments)]
        invoice = invoices.record_invoice(
            assignment=assignment,
            number=number,
            amount=Decimal(amount),
            issued_on=today - timedelta(days=issued),
            due_on=today + timedelta(days=due),
            actor=recorder,
        ).invoice
        if becomes in ("approved-once", "approved", "paid"):
            invoice = invoices.approve_invoice(
                invoice=invoice, seen=invoice.version, actor=approver
            ).invoice
        if becomes in ("approved", "paid") and invoice.status != Invoice.Status.APPROVED:
            invoice = invoices.approve_invoice(
                invoice=invoice, seen=invoice.version, actor=approvers[-1]
            ).invoice
        if becomes == "paid":
            _record_demo_payment(invoice, approver)
        elif becomes == "rejected":
            invoices.reject_invoice(
                invoice=invoice,
                seen=invoice.version,
                reason="The work was not finished; the vendor will send a new invoice.",
                actor=approver,
            )
        elif becomes == "void":
            invoices.void_invoice(
                invoice=invoice,
                seen=invoice.version,
                reason="Recorded against the wrong complaint.",
                actor=recorder,
            )


def _record_demo_payment(invoice: Invoice, actor) -> None:
    """A payment as the fenced payment records it, without a payment service to call (the
    demo runs without one): the invoice claimed and paid, the payment and its timeline."""
    now = timezone.now()
    Invoice.objects.filter(pk=invoice.pk).update(
        status=Invoice.Status.PAID,
        payment_claim=1,
        payment_claimed_at=now,
        version=F("version") + 1,
    )
    VendorPayment.objects.create(
        invoice=invoice,
        amount=invoice.amount,
        currency=settings.CURRENCY,
        reference=f"DEMO-{invoice.pk:06d}",
        paid_at=now,
        paid_by=actor,
        actor_label=f"{actor.get_username()} via seed_demo",
        fence_token=1,
    )
    for kind in (InvoiceEvent.Kind.PAYMENT_SENT, InvoiceEvent.Kind.PAID):
        InvoiceEvent.objects.create(
            invoice=invoice,
            kind=kind,
            at=now,
            actor=actor,
            actor_label=f"{actor.get_username()} via seed_demo",
            from_status=Invoice.Status.APPROVED if kind == InvoiceEvent.Kind.PAID else "",
            to_status=Invoice.Status.PAID if kind == InvoiceEvent.Kind.PAID else "",
            note=f"DEMO-{invoice.pk:06d}" if kind == InvoiceEvent.Kind.PAID else "",
            amount_after=invoice.amount,
        )
