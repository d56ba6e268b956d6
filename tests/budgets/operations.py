"""Budget approval, declared once: what the frame and the runner know of it.

The lock resource is ``budget-approval:org:<org_id>:<YYYY>``: one lease per budget. The
organization is in the name, so the lock status page finds an organization's leases with
one bounded SCAN of its prefix. ``BudgetsConfig.ready()`` registers ``APPROVAL``.
"""

import re
from datetime import timedelta

from django.urls import reverse
from django.utils.translation import gettext as _

from hoa.models import Organization
from hoa.operations import FencedOperation, ResourceInfo
from tests.budgets import answers
from tests.budgets.models import AnnualBudget

OPERATION = "budget-approval"
APPROVE_PERMISSION = "budgets.approve_budget"
PREFIX = f"{OPERATION}:org:"


def budget_resource(organization, year: int) -> str:
    """The resource of ``organization``'s budget for ``year``."""
    return f"{PREFIX}{int(organization.pk)}:{int(year):04d}"


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


APPROVAL = FencedOperation(
    name=OPERATION,
    permission=APPROVE_PERMISSION,
    # Ids of at most 18 digits fit a bigint; [0-9], not \d (other scripts' digits).
    resource=re.compile(r"budget-approval:org:(?P<org>[0-9]{1,18}):(?P<year>[0-9]{4})"),
    example=f"{PREFIX}1:2027",
    answers=answers.WORDS,
    ttl=timedelta(seconds=30),
    ttl_setting="BUDGETS_LOCK_TTL_SECONDS",
    describe=describe_resources,
)
