"""Reads of the complaint pages: the filtered list, the timeline, the dashboard's numbers."""

from datetime import datetime

from django.db.models import Case, IntegerField, Q, QuerySet, Value, When
from django.utils import timezone

from hoa.complaints.extensions import TimelineEntry, extensions
from hoa.models import Complaint, Organization

UNRESOLVED = "unresolved"  # the status filter's "not resolved yet"
# The complaint list's sort orders: the value in the URL -> the ordering.
SORTS = {
    "-opened": ("-opened_at", "-pk"),
    "opened": ("opened_at", "pk"),
    "due": ("sla_due_at", "pk"),
    "priority": ("priority_rank", "sla_due_at", "pk"),
    "title": ("title", "pk"),
}
EVENT_TEMPLATE = "hoa/complaints/_timeline_event.html"
EMAIL_TEMPLATE = "hoa/complaints/_timeline_email.html"


def complaint_list(organization: Organization, filters: dict, *, now: datetime | None = None):
    """The organization's complaints that match a valid filter form's ``cleaned_data``,
    sorted, with what the operations' columns show."""
    complaints = Complaint.objects.for_organization(organization).select_related("unit")
    complaints = filter_complaints(complaints, filters, now=now)
    for extension in extensions():
        if extension.annotate is not None:
            complaints = extension.annotate(complaints)
    return complaints


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
    for extension in extensions():
        if extension.filter is not None and (value := filters.get(extension.filter.name)):
            complaints = extension.filter.apply(complaints, value)
    ranks = [When(priority=p, then=Value(n)) for n, p in enumerate(Complaint.Priority.values)]
    complaints = complaints.annotate(
        priority_rank=Case(*ranks, default=Value(len(ranks)), output_field=IntegerField())
    )
    return complaints.order_by(*SORTS[filters.get("sort") or "-opened"])


def timeline(complaint: Complaint) -> list[TimelineEntry]:
    """Status changes, notes, SLA changes and breaches, the emails to the reporter (when
    queued, and what became of them), and what the operations add (the vendor
    assignments), newest first. At the same instant an event (the status change an
    assignment made) comes before (above) what the operations add."""
    events = complaint.events.select_related("actor")
    entries = [
        TimelineEntry(at=event.at, kind=event.kind, template=EVENT_TEMPLATE, item=event, rank=1)
        for event in events
    ]
    entries += [
        TimelineEntry(
            at=email.created_at, kind="reporter_email", template=EMAIL_TEMPLATE, item=email
        )
        for email in complaint.reporter_emails.all()
    ]
    for extension in extensions():
        if extension.timeline is not None:
            entries.extend(extension.timeline(complaint))
    return sorted(entries, key=lambda entry: entry.key, reverse=True)


def dashboard_context(organization: Organization) -> dict:
    """The open complaints on the dashboard: how many, how many past their SLA now (not as
    of the last sweep), the most urgent (the earliest due first)."""
    complaints = Complaint.objects.for_organization(organization).open()
    return {
        "open_complaints": complaints.count(),
        "breached_complaints": complaints.past_sla().count(),
        "urgent_complaints": complaints.select_related("unit").order_by("sla_due_at", "pk")[:8],
    }
