"""Reads for the pages and the admin: who handles which complaint, and the history."""

from django.db.models import OuterRef, QuerySet, Subquery

from hoa.models import Complaint, Organization
from vendors.models import VendorAssignment, VendorContract


def with_current_vendor(complaints: QuerySet) -> QuerySet:
    """Annotate each complaint with ``current_vendor_name`` (``None`` when unassigned)."""
    active = VendorAssignment.objects.filter(complaint=OuterRef("pk"), active=True)
    return complaints.annotate(current_vendor_name=Subquery(active.values("vendor__name")[:1]))


def active_assignment(complaint: Complaint) -> VendorAssignment | None:
    return complaint.assignments.filter(active=True).select_related("vendor").first()


def assignment_history(complaint: Complaint) -> QuerySet:
    """Every assignment of the complaint, newest first."""
    return complaint.assignments.select_related("vendor", "assigned_by").order_by(
        "-assigned_at", "-pk"
    )


def contracts_of(organization: Organization) -> QuerySet:
    """The organization's vendor contracts, by vendor, newest window first."""
    return (
        VendorContract.objects.for_organization(organization)
        .select_related("vendor")
        .order_by("vendor__name", "vendor_id", "-starts_on")
    )
