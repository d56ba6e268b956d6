"""Reads of invoices for the staff pages, the dashboard, the complaint page and the CSV."""

from datetime import date, datetime, time, timedelta
from decimal import Decimal

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Sum
from django.utils import timezone

from hoa.models import Complaint, Organization
from vendors.insurance import today_of
from vendors.models import (
    ApprovalPolicy,
    Invoice,
    InvoiceApproval,
    InvoiceEvent,
    Vendor,
    VendorPayment,
)

Status = Invoice.Status


def invoices_of(organization: Organization) -> QuerySet:
    """The association's invoices with what the list shows, newest first."""
    return (
        Invoice.objects.for_organization(organization)
        .select_related("vendor", "assignment__complaint", "payment")
        .annotate(standing_approvals=_standing_count())
        .order_by("-issued_on", "-pk")
    )


def _standing_count():
    return Count("approvals", filter=Q(approvals__voided_at__isnull=True), distinct=True)


def filtered(
    invoices: QuerySet, filters: dict, *, user, today: date, policy: ApprovalPolicy
) -> QuerySet:
    """``invoices`` narrowed by the list's filters (``status``, ``vendor``, ``waiting``:
    waiting for ``user``'s approval under ``policy``, ``overdue``)."""
    if status := filters.get("status"):
        invoices = invoices.filter(status=status)
    if vendor := filters.get("vendor"):
        invoices = invoices.filter(vendor=vendor)
    if filters.get("waiting"):
        invoices = waiting_for(invoices, user, policy)
    if filters.get("overdue"):
        invoices = invoices.filter(status__in=Invoice.OWED_STATUSES, due_on__lt=today)
    return invoices


def waiting_for(invoices: QuerySet, user, policy: ApprovalPolicy) -> QuerySet:
    """Received invoices ``user`` could approve now (``vendors.approvals``): not approved by
    them already, and not one they recorded, unless ``policy`` lets its recorder give the
    first approval and it has none yet."""
    mine = InvoiceApproval.objects.standing().filter(invoice=OuterRef("pk"), approver=user)
    others = InvoiceApproval.objects.standing().filter(invoice=OuterRef("pk"))
    waiting = invoices.filter(status=Status.RECEIVED).exclude(Exists(mine))
    if policy.recorder_may_approve:
        return waiting.exclude(Q(recorded_by=user) & Exists(others))
    return waiting.exclude(recorded_by=user)


def vendors_invoicing(organization: Organization) -> QuerySet:
    """The vendors with an invoice in the association: the list's vendor filter."""
    return Vendor.objects.filter(invoices__organization=organization).distinct().order_by("name")


def totals(organization: Organization) -> dict:
    """What the association owes (received and approved invoices) and what it paid this
    month, in its own time zone."""
    today = today_of(organization)
    first = today.replace(day=1)
    start = timezone.make_aware(datetime.combine(first, time()), organization.zone)
    # Owed and overdue in one statement: overdue is owed and due before today.
    owed = Invoice.objects.for_organization(organization).owed()
    owed = owed.aggregate(
        total=Sum("amount"), count=Count("pk"), overdue=Count("pk", filter=Q(due_on__lt=today))
    )
    paid = VendorPayment.objects.for_organization(organization).filter(paid_at__gte=start)
    paid = paid.aggregate(total=Sum("amount"), count=Count("pk"))
    return {
        "owed_total": owed["total"] or Decimal("0.00"),
        "owed_count": owed["count"],
        "overdue_count": owed["overdue"],
        "paid_total": paid["total"] or Decimal("0.00"),
        "paid_count": paid["count"],
        "paid_since": first,
    }


def invoice_of(organization: Organization, pk: int) -> QuerySet:
    """The invoice page's invoice, within the association (an id of another: none)."""
    return (
        Invoice.objects.for_organization(organization)
        .select_related(
            "vendor",
            "assignment__complaint",
            "assignment__vendor",
            "recorded_by",
            "possible_duplicate_of",
            "duplicate_confirmed_by",
            "payment",
            "document",
        )
        .filter(pk=pk)
    )


def timeline(invoice: Invoice) -> QuerySet:
    """The invoice's timeline, newest first."""
    return (
        InvoiceEvent.objects.filter(invoice=invoice).select_related("actor").order_by("-at", "-pk")
    )


def approvals(invoice: Invoice) -> list[InvoiceApproval]:
    return list(invoice.approvals.select_related("approver").order_by("at", "pk"))


def policy(organization: Organization) -> ApprovalPolicy:
    return ApprovalPolicy.of(organization)


def of_complaint(complaint: Complaint) -> QuerySet:
    """The invoices of the complaint's assignments, oldest first."""
    return (
        Invoice.objects.filter(assignment__complaint=complaint)
        .select_related("vendor", "payment")
        .order_by("issued_on", "pk")
    )


def dashboard_context(request, organization: Organization) -> dict:
    """The invoices on the dashboard: owed, overdue, waiting for the viewer's approval."""
    invoices = Invoice.objects.for_organization(organization)
    return {
        "invoices": totals(organization),
        "invoices_waiting": waiting_for(
            invoices, request.user, ApprovalPolicy.of(organization)
        ).count()
        if request.user.has_perm("vendors.approve_invoice")
        else None,
    }


def csv_rows(invoices: QuerySet):
    """The accountant's rows: one per invoice, in the list's order, streamed."""
    rows = invoices.values_list(
        "pk",
        "vendor__name",
        "number",
        "issued_on",
        "due_on",
        "amount",
        "status",
        "payment__paid_at",
        "payment__reference",
        "assignment__complaint_id",
    )
    return rows.iterator(chunk_size=2000)


def due_on_default(organization: Organization) -> date:
    """A new invoice's due date, unless the vendor's says otherwise: in 30 days."""
    return today_of(organization) + timedelta(days=30)
