"""Reads for the pages and the admin: who handles which complaint, and the history."""

import re
from dataclasses import dataclass
from datetime import datetime

from django.db.models import (
    Case,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from hoa.models import Complaint, ComplaintEvent, Organization
from hoa.operations import ResourceInfo
from vendors.forms import COMPLAINT_SORTS, UNASSIGNED, UNRESOLVED
from vendors.models import VendorAssignment, VendorContract


def with_current_vendor(complaints: QuerySet) -> QuerySet:
    """Annotate each complaint with ``current_vendor_name`` (``None`` when unassigned)."""
    active = VendorAssignment.objects.filter(complaint=OuterRef("pk"), active=True)
    return complaints.annotate(current_vendor_name=Subquery(active.values("vendor__name")[:1]))


def filter_complaints(complaints: QuerySet, filters: dict, *, now: datetime | None = None):
    """The complaints that match a valid ``ComplaintFilterForm``'s ``cleaned_data``, sorted."""
    now = now or timezone.now()
    if query := filters.get("q"):
        complaints = complaints.filter(Q(title__icontains=query) | Q(unit__label__icontains=query))
    if status := filters.get("status"):
        complaints = complaints.open() if status == UNRESOLVED else complaints.filter(status=status)
    if priority := filters.get("priority"):
        complaints = complaints.filter(priority=priority)
    late = Complaint.objects.past_sla(now).values("pk")
    if filters.get("overdue") == "yes":
        complaints = complaints.filter(pk__in=late)
    elif filters.get("overdue") == "no":
        complaints = complaints.exclude(pk__in=late)
    if vendor := filters.get("vendor"):
        active = VendorAssignment.objects.filter(complaint=OuterRef("pk"), active=True)
        if vendor == UNASSIGNED:
            complaints = complaints.filter(~Exists(active))
        else:
            complaints = complaints.filter(Exists(active.filter(vendor_id=int(vendor))))
    ranks = [When(priority=p, then=Value(n)) for n, p in enumerate(Complaint.Priority.values)]
    complaints = complaints.annotate(
        priority_rank=Case(*ranks, default=Value(len(ranks)), output_field=IntegerField())
    )
    return complaints.order_by(*COMPLAINT_SORTS[filters.get("sort") or "-opened"])


@dataclass(frozen=True)
class TimelineEntry:
    """One line of a complaint's timeline: a ``ComplaintEvent`` or a vendor assignment."""

    at: datetime
    event: ComplaintEvent | None = None
    assignment: VendorAssignment | None = None

    @property
    def kind(self) -> str:
        return self.event.kind if self.event is not None else "assignment"


def timeline(complaint: Complaint) -> list[TimelineEntry]:
    """Status changes, notes, SLA changes and breaches, and assignments, newest first.

    At the same instant the status change an assignment made comes before (above) it.
    """
    entries = [
        *(TimelineEntry(at=e.at, event=e) for e in complaint.events.select_related("actor")),
        *(TimelineEntry(at=a.assigned_at, assignment=a) for a in assignment_history(complaint)),
    ]
    return sorted(
        entries,
        key=lambda e: (e.at, e.event is not None, e.event.pk if e.event else e.assignment.pk),
        reverse=True,
    )


def active_assignment(
    complaint: Complaint, *, with_complaint_status: bool = False
) -> VendorAssignment | None:
    """The complaint's active assignment, with its vendor; ``with_complaint_status`` also
    reads the complaint's status in the same statement (``complaint_status``)."""
    active = complaint.assignments.filter(active=True).select_related("vendor")
    if with_complaint_status:
        active = active.annotate(complaint_status=F("complaint__status"))
    return active.first()


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


def dashboard_context(request, organization: Organization) -> dict:
    """The open complaints on the dashboard: how many, how many past their SLA now (not as
    of the last sweep), the most urgent (the earliest due first)."""
    complaints = Complaint.objects.for_organization(organization).open()
    return {
        "open_complaints": complaints.count(),
        "breached_complaints": complaints.past_sla().count(),
        "urgent_complaints": complaints.select_related("unit").order_by("sla_due_at", "pk")[:8],
    }
