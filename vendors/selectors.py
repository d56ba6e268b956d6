"""Reads for the pages and the admin: who handles which complaint, and the history."""

import re

from django.db.models import (
    Exists,
    F,
    OuterRef,
    Prefetch,
    QuerySet,
    Subquery,
    prefetch_related_objects,
)
from django.urls import reverse
from django.utils.translation import gettext as _

from hoa.models import Complaint, ComplaintEvent, Organization
from hoa.operations import ResourceInfo
from vendors.models import (
    CertificateRecorded,
    InsuranceLapse,
    Invoice,
    Vendor,
    VendorAssignment,
    VendorContract,
)

UNASSIGNED = "none"  # the vendor filter's "unassigned"
_ASSIGNMENTS = "assignments"  # Complaint.assignments, the name of its prefetch


def with_current_vendor(complaints: QuerySet) -> QuerySet:
    """Annotate each complaint with ``current_vendor_name`` (``None`` when unassigned)."""
    active = VendorAssignment.objects.filter(complaint=OuterRef("pk"), active=True)
    return complaints.annotate(current_vendor_name=Subquery(active.values("vendor__name")[:1]))


def handled_by(complaints: QuerySet, vendor: str) -> QuerySet:
    """The complaints the vendor with id ``vendor`` handles now (``UNASSIGNED``: nobody)."""
    active = VendorAssignment.objects.filter(complaint=OuterRef("pk"), active=True)
    if vendor == UNASSIGNED:
        return complaints.filter(~Exists(active))
    return complaints.filter(Exists(active.filter(vendor_id=int(vendor))))


def has_vendor(complaint: Complaint) -> bool:
    """Whether a vendor is actively assigned to ``complaint``: from the assignments the
    page read (``assignments_shown``) when it read them, else from the database."""
    if (shown := _shown(complaint)) is not None:
        return any(assignment.active for assignment in shown)
    return complaint.assignments.filter(active=True).exists()


def active_assignment(
    complaint: Complaint, *, with_complaint_status: bool = False
) -> VendorAssignment | None:
    """The complaint's active assignment, with its vendor; ``with_complaint_status`` also
    reads the complaint's status in the same statement (``complaint_status``)."""
    active = complaint.assignments.filter(active=True).select_related("vendor")
    if with_complaint_status:
        active = active.annotate(complaint_status=F("complaint__status"))
    return active.first()


def assignment_state(complaint: Complaint) -> tuple[str, VendorAssignment | None]:
    """The complaint's status and its active assignment (with its vendor), as the state
    check after the fence reads them: one statement when an assignment is active, two
    when none is."""
    current = active_assignment(complaint, with_complaint_status=True)
    if current is not None:
        return current.complaint_status, current
    return Complaint.objects.values_list("status", flat=True).get(pk=complaint.pk), None


def assignment_history(complaint: Complaint) -> QuerySet:
    """Every assignment of the complaint, newest first."""
    return complaint.assignments.select_related("vendor", "assigned_by").order_by(
        "-assigned_at", "-pk"
    )


def assignments_shown(complaint: Complaint) -> list[VendorAssignment]:
    """``assignment_history``, read once per complaint object: the complaint page's vendor
    card, invoices, status menu (``has_vendor``) and timeline share it (four statements
    were one each). Kept as Django's prefetch of ``complaint.assignments``; only the page's
    reads use it. The workflow asks ``has_vendor`` of the complaint it locked, a fresh
    object that reads the database."""
    history = VendorAssignment.objects.select_related("vendor", "assigned_by")
    history = history.order_by("-assigned_at", "-pk")  # as assignment_history
    prefetch_related_objects([complaint], Prefetch(_ASSIGNMENTS, queryset=history))
    return _shown(complaint)


def _shown(complaint: Complaint) -> list[VendorAssignment] | None:
    prefetched = getattr(complaint, "_prefetched_objects_cache", {})
    shown = prefetched.get(_ASSIGNMENTS)
    return None if shown is None else list(shown)


def lapses_while_assigned(complaint: Complaint, history: list[VendorAssignment]) -> list:
    """The insurance lapses of the complaint's vendors recorded while each was assigned to
    it (``history``: its assignments), oldest first."""
    if not history:
        return []
    lapses = InsuranceLapse.objects.filter(
        organization_id=complaint.organization_id,
        vendor_id__in={assignment.vendor_id for assignment in history},
    ).select_related("vendor")
    return [
        lapse
        for lapse in lapses.order_by("recorded_at", "pk")
        if any(
            assignment.vendor_id == lapse.vendor_id
            and assignment.assigned_at <= lapse.recorded_at
            and (
                assignment.deactivated_at is None or lapse.recorded_at <= assignment.deactivated_at
            )
            for assignment in history
        )
    ]


def contracts_of(organization: Organization) -> QuerySet:
    """The organization's vendor contracts, by vendor, newest window first."""
    return (
        VendorContract.objects.for_organization(organization)
        .select_related("vendor")
        .order_by("vendor__name", "vendor_id", "-starts_on")
    )


def contracts_of_vendor(organization: Organization, vendor: Vendor) -> QuerySet:
    """``vendor``'s contracts with the organization, newest window first."""
    return (
        VendorContract.objects.for_organization(organization)
        .filter(vendor=vendor)
        .select_related("vendor")
        .order_by("-starts_on", "-pk")
    )


def certificates_recorded(organization: Organization, vendor: Vendor) -> QuerySet:
    """The certificates staff recorded on ``vendor``'s contracts with the organization,
    newest first: its insurance history."""
    return (
        CertificateRecorded.objects.for_organization(organization)
        .filter(contract__vendor=vendor)
        .select_related("contract")
        .order_by("-at", "-pk")
    )


def describe_resources(matches: dict[str, re.Match]) -> dict[str, ResourceInfo]:
    """The lock status page's view of ``vendor-assignment:complaint:<id>`` names."""
    ids = {resource: int(match["complaint"]) for resource, match in matches.items()}
    complaints = Complaint.objects.select_related("organization").in_bulk(set(ids.values()))
    described = {}
    for resource, complaint_id in ids.items():
        complaint = complaints.get(complaint_id)
        organization = complaint.organization if complaint else None
        described[resource] = ResourceInfo(
            resource=resource,
            organization=organization,
            description=_("Vendor for complaint #%(id)s %(title)s")
            % {"id": complaint_id, "title": complaint.title if complaint else ""},
            recorded_token=complaint.last_fence_token if complaint else None,
            url=reverse("complaints:complaint", args=[organization.slug, complaint_id])
            if organization
            else "",
        )
    return described


def describe_payment_resources(matches: dict[str, re.Match]) -> dict[str, ResourceInfo]:
    """The lock status page's view of ``vendor-payment:invoice:<id>`` names."""
    ids = {resource: int(match["invoice"]) for resource, match in matches.items()}
    invoices = Invoice.objects.select_related("organization", "vendor").in_bulk(set(ids.values()))
    described = {}
    for resource, invoice_id in ids.items():
        invoice = invoices.get(invoice_id)
        organization = invoice.organization if invoice else None
        described[resource] = ResourceInfo(
            resource=resource,
            organization=organization,
            description=_("Payment of invoice #%(id)s %(vendor)s %(number)s")
            % {
                "id": invoice_id,
                "vendor": invoice.vendor.name if invoice else "",
                "number": invoice.number if invoice else "",
            },
            recorded_token=invoice.last_fence_token if invoice else None,
            url=invoice_url(invoice) if invoice else "",
        )
    return described


def invoice_url(invoice: Invoice) -> str:
    return reverse("vendors:invoice", args=[invoice.organization.slug, invoice.pk])


def closes_of(complaint) -> QuerySet:
    """The ids of ``complaint``'s closes (its status changes to closed), latest first: the
    latest is what a dispatch key names (``vendors.dispatch.idempotency_key``)."""
    return (
        ComplaintEvent.objects.filter(
            complaint=complaint,
            kind=ComplaintEvent.Kind.STATUS_CHANGED,
            to_status=Complaint.Status.CLOSED,
        )
        .order_by("-pk")
        .values("pk")
    )
