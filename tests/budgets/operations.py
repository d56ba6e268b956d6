"""Budget approval, declared once: what the frame and the runner know of it.

The lock resource is ``budget-approval:org:<org_id>:<YYYY>``: one lease per budget. The
organization is in the name, so the lock status page finds an organization's leases with
one bounded SCAN of its prefix. ``BudgetsConfig.ready()`` registers ``APPROVAL``.
"""

import re
from datetime import timedelta

from hoa.operations import FencedOperation
from tests.budgets import answers, selectors

OPERATION = "budget-approval"
APPROVE_PERMISSION = "budgets.approve_budget"
PREFIX = f"{OPERATION}:org:"


def budget_resource(organization, year: int) -> str:
    """The resource of ``organization``'s budget for ``year``."""
    return f"{PREFIX}{int(organization.pk)}:{int(year):04d}"


APPROVAL = FencedOperation(
    name=OPERATION,
    permission=APPROVE_PERMISSION,
    # Ids of at most 18 digits fit a bigint; [0-9], not \d (other scripts' digits).
    resource=re.compile(r"budget-approval:org:(?P<org>[0-9]{1,18}):(?P<year>[0-9]{4})"),
    example=f"{PREFIX}1:2027",
    answers=answers.WORDS,
    ttl=timedelta(seconds=30),
    ttl_setting="BUDGETS_LOCK_TTL_SECONDS",
    describe=selectors.describe_resources,
)
