"""Reads for the pages and the admin: who handles which complaint, and the history."""

import re
from datetime import date

from django.db.models import OuterRef, QuerySet, Subquery
from django.urls import reverse
from django.utils.translation import gettext as _

from hoa.models import Complaint, Organization
from hoa.operations import ResourceInfo
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
            url=reverse("vendors:complaint", args=[organization.slug, complaint_id])
            if organization
            else "",
        )
    return described


def dashboard_context(request, organization: Organization, month: date) -> dict:
    """The open complaints on the dashboard: how many, how many late, the most urgent."""
    complaints = Complaint.objects.for_organization(organization).open()
    return {
        "open_complaints": complaints.count(),
        "breached_complaints": complaints.breached().count(),
        "urgent_complaints": complaints.select_related("unit").order_by(
            "sla_breached_at", "sla_due_at"
        )[:8],
    }
