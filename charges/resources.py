"""What monthly charge generation is: its audit name, its permission, its lease.

The lock resource is ``monthly-charges:org:<org_id>:<YYYY-MM>``: one lease per
organization and month. The organization is in the name, so the lock status page finds an
organization's leases with one bounded SCAN of its prefix.
"""

import re
from collections.abc import Iterable
from datetime import date

from charges.exceptions import LOCK_REFUSALS, NotAllowed
from charges.models import month_label
from hoa.fenced import FencedOperation

OPERATION = "monthly-charges"
GENERATE_PERMISSION = "charges.generate_charges"
PREFIX = f"{OPERATION}:org:"
# Ids of at most 18 digits fit a bigint: a stray key with a longer number is no row of ours.
# Use with fullmatch(); [0-9], not \d, which also matches other scripts' digits.
RESOURCE = re.compile(r"monthly-charges:org:(?P<org>[0-9]{1,18}):(?P<month>[0-9]{4}-[0-9]{2})")
EXAMPLE = f"{PREFIX}1:2026-01"


def charge_resource(organization, month: date) -> str:
    """The resource of ``organization``'s charges for ``month``."""
    return f"{PREFIX}{int(organization.pk)}:{month_label(month)}"


def scan_prefixes(organization_ids: Iterable[int]) -> list[str]:
    return [f"{PREFIX}{int(pk)}:" for pk in organization_ids]


# What the operation is, for the steps every fenced operation takes the same way.
GENERATION = FencedOperation(
    OPERATION, GENERATE_PERMISSION, "CHARGES_LOCK_TTL_SECONDS", NotAllowed, LOCK_REFUSALS
)
