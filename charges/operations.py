"""Monthly charge generation, declared once: what the frame and the runner know of it.

The lock resource is ``monthly-charges:org:<org_id>:<YYYY-MM>``: one lease per organization
and month. The organization is in the name, so the lock status page finds an organization's
leases with one bounded SCAN of its prefix. ``GENERATION`` is registered here.
"""

import re
from datetime import date, timedelta

from charges import answers, selectors
from charges.models import month_label
from hoa.operations import FencedOperation, register

OPERATION = "monthly-charges"
GENERATE_PERMISSION = "charges.generate_charges"
PREFIX = f"{OPERATION}:org:"


def charge_resource(organization, month: date) -> str:
    """The resource of ``organization``'s charges for ``month``."""
    return f"{PREFIX}{int(organization.pk)}:{month_label(month)}"


GENERATION = register(
    FencedOperation(
        name=OPERATION,
        permission=GENERATE_PERMISSION,
        # Ids of at most 18 digits fit a bigint: a stray key with a longer number is no row of
        # ours. [0-9], not \d, which also matches other scripts' digits.
        resource=re.compile(
            r"monthly-charges:org:(?P<org>[0-9]{1,18}):(?P<month>[0-9]{4}-[0-9]{2})"
        ),
        example=f"{PREFIX}1:2026-01",
        answers=answers.WORDS,
        ttl=timedelta(seconds=60),
        ttl_setting="CHARGES_LOCK_TTL_SECONDS",
        describe=selectors.describe_resources,
    )
)
