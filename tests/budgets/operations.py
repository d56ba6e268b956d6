"""Budget approval, declared and registered once: what the frame knows of it. One lease per
budget, ``budget-approval:org:<org_id>:<YYYY>`` (the lock page SCANs an org's prefix)."""

import re
from datetime import timedelta

from django.db.models import Q
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from hoa.operations import FencedOperation, Link, Pages, ResourceInfo, add_pages, register
from tests.budgets import answers
from tests.budgets.models import AnnualBudget

OPERATION = "budget-approval"
APPROVE_PERMISSION = "budgets.approve_budget"
PREFIX = f"{OPERATION}:org:"


def budget_resource(organization, year: int) -> str:
    """The resource of ``organization``'s budget for ``year``."""
    return f"{PREFIX}{int(organization.pk)}:{int(year):04d}"


def describe_resources(matches: dict[str, re.Match]) -> dict[str, ResourceInfo]:
    """The lock page's view of ``budget-approval:org:<id>:<year>`` names: each one's budget
    (a lease is taken only on a budget that exists), in one query."""
    resources = {(int(m["org"]), int(m["year"])): resource for resource, m in matches.items()}
    named = Q(pk__in=[])
    for org_id, year in resources:
        named |= Q(organization_id=org_id, year=year)
    described = {}
    for budget in AnnualBudget.objects.filter(named).select_related("organization"):
        resource = resources[budget.organization_id, budget.year]
        described[resource] = ResourceInfo(
            resource=resource,
            organization=budget.organization,
            description=_("Budget for %(year)s") % {"year": budget.year},
            recorded_token=budget.last_fence_token,
            url=reverse("budgets:budgets", args=[budget.organization.slug]),
        )
    return described


APPROVAL = register(
    FencedOperation(
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
)

# Its page in the navigation, and what the demo's staff group may see of it.
add_pages(
    Pages(
        app="budgets",
        order=30,
        links=(Link(gettext_lazy("Budgets"), "budgets:budgets", order=40),),
        staff_permissions=("budgets.view_annualbudget",),
    )
)
