"""Reads of annual budgets: what the staff page, the dashboard and the lock page show."""

import re

from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from hoa.models import Organization
from hoa.operations import ResourceInfo
from tests.budgets.models import AnnualBudget


def budgets_of(organization: Organization) -> QuerySet:
    """The organization's budgets, newest year first."""
    return AnnualBudget.objects.for_organization(organization).order_by("-year")


def describe_resources(matches: dict[str, re.Match]) -> dict[str, ResourceInfo]:
    """The lock status page's view of ``budget-approval:org:<id>:<year>`` names."""
    wanted = {resource: (int(m["org"]), int(m["year"])) for resource, m in matches.items()}
    org_ids = {org_id for org_id, _year in wanted.values()}
    organizations = Organization.objects.in_bulk(org_ids)
    rows = AnnualBudget.objects.filter(
        organization_id__in=org_ids, year__in={year for _org_id, year in wanted.values()}
    ).values_list("organization_id", "year", "last_fence_token")
    tokens = {(org_id, year): token for org_id, year, token in rows}
    described = {}
    for resource, (org_id, year) in wanted.items():
        organization = organizations.get(org_id)
        described[resource] = ResourceInfo(
            resource=resource,
            organization=organization,
            description=_("Budget for %(year)s") % {"year": year},
            recorded_token=tokens.get((org_id, year)),
            url=reverse("budgets:budgets", args=[organization.slug]) if organization else "",
        )
    return described


def dashboard_context(request, organization: Organization) -> dict:
    """This year's budget on the dashboard."""
    year = timezone.localdate().year
    return {"budget_year": year, "budget": budgets_of(organization).filter(year=year).first()}
