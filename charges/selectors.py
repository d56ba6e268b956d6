"""Reads of monthly charges: totals for the chart, and what the shared pages show of them."""

import enum
import re
from collections import defaultdict
from datetime import date, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from charges.models import MonthlyChargeRun, month_label
from hoa.dates import month_name
from hoa.models import Organization
from hoa.operations import ResourceInfo


def current_month() -> date:
    """Return the first day of the current month in ``TIME_ZONE``."""
    return timezone.localdate().replace(day=1)


class MonthStartState(enum.StrEnum):
    """Where an association's current month start stands (a metrics label)."""

    COMPLETED = "completed"
    PENDING = "pending"
    NOT_STARTED = "not_started"


def month_start_states() -> dict[MonthStartState, int]:
    """Count the associations by the state of their own current month's run."""
    now = timezone.now()
    month_of_org = {
        pk: now.astimezone(ZoneInfo(zone)).date().replace(day=1)
        for pk, zone in Organization.objects.values_list("pk", "time_zone")
    }
    status_of = {
        (org_id, month): status
        for org_id, month, status in MonthlyChargeRun.objects.filter(
            month__in=set(month_of_org.values())
        ).values_list("organization_id", "month", "status")
    }
    counts = dict.fromkeys(MonthStartState, 0)
    for pk, month in month_of_org.items():
        status = status_of.get((pk, month))
        if status == MonthlyChargeRun.Status.COMPLETED:
            counts[MonthStartState.COMPLETED] += 1
        elif status is None:
            counts[MonthStartState.NOT_STARTED] += 1
        else:
            counts[MonthStartState.PENDING] += 1
    return counts


def add_months(month: date, count: int) -> date:
    """Return the first day of the month ``count`` months after ``month`` (may be negative)."""
    index = month.year * 12 + month.month - 1 + count
    return date(index // 12, index % 12 + 1, 1)


def monthly_totals(
    *, organization: Organization, until: date, months: int = 12
) -> list[tuple[date, Decimal]]:
    """Return ``(month, total)`` for the ``months`` months ending with ``until``, oldest first.

    A month without a completed run counts as zero.
    """
    first = add_months(until, -(months - 1))
    totals = dict(
        MonthlyChargeRun.objects.for_organization(organization)
        .completed()
        .filter(month__range=(first, until))
        .values_list("month", "total")
    )
    return [
        (add_months(first, offset), totals.get(add_months(first, offset), Decimal("0.00")))
        for offset in range(months)
    ]


def describe_resources(matches: dict[str, re.Match]) -> dict[str, ResourceInfo]:
    """The lock status page's view of ``monthly-charges:org:<id>:<YYYY-MM>`` names."""
    wanted: dict[str, tuple[int, date]] = {}
    for resource, match in matches.items():
        try:
            month = datetime.strptime(match["month"], "%Y-%m").date()
        except ValueError:
            continue  # not a month: described by its name only
        wanted[resource] = (int(match["org"]), month)
    organizations = Organization.objects.in_bulk({org_id for org_id, _month in wanted.values()})
    months_by_org = defaultdict(set)
    for org_id, month in wanted.values():
        months_by_org[org_id].add(month)
    condition = Q(pk__in=[])
    for org_id, months in months_by_org.items():
        condition |= Q(organization_id=org_id, month__in=months)
    tokens = {
        (org_id, month): token
        for org_id, month, token in MonthlyChargeRun.objects.filter(condition).values_list(
            "organization_id", "month", "last_fence_token"
        )
    }
    described = {}
    for resource, (org_id, month) in wanted.items():
        organization = organizations.get(org_id)
        described[resource] = ResourceInfo(
            resource=resource,
            organization=organization,
            description=_("Monthly charges for %(month)s") % {"month": month_name(month)},
            recorded_token=tokens.get((org_id, month)),
            url=reverse("charges:run", args=[organization.slug, month_label(month)])
            if organization
            else "",
        )
    return described


def dashboard_context(request, organization: Organization) -> dict:
    """This month's run on the dashboard."""
    month = current_month()
    return {
        "charges_month": month,
        "current_run": MonthlyChargeRun.objects.for_organization(organization)
        .filter(month=month)
        .first(),
    }


def organization_annotations() -> dict:
    """On the organization list: 0 or 1, there is one run per organization and month."""
    month = current_month()
    return {
        "completed_run_count": Count(
            "charge_runs",
            filter=Q(
                charge_runs__month=month,
                charge_runs__status=MonthlyChargeRun.Status.COMPLETED,
            ),
            distinct=True,
        )
    }
