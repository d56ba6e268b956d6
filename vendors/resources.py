"""What vendor assignment is: its audit name, its permission, its lease.

The lock resource is ``vendor-assignment:complaint:<id>``.

One lease per complaint, never wider. The organization is the complaint's, not in the
name, so the lock status page scans the one prefix (bounded) and keeps the leases of the
viewer's complaints.
"""

import re
from collections.abc import Iterable

from hoa.fenced import FencedOperation
from vendors.exceptions import LOCK_REFUSALS, NotAllowed

OPERATION = "vendor-assignment"
ASSIGN_PERMISSION = "vendors.assign_vendor"
PREFIX = f"{OPERATION}:complaint:"
# Ids of at most 18 digits fit a bigint; [0-9], not \d (other scripts' digits).
RESOURCE = re.compile(r"vendor-assignment:complaint:(?P<complaint>[0-9]{1,18})")
EXAMPLE = f"{PREFIX}1"


def assignment_resource(complaint_id: int) -> str:
    return f"{PREFIX}{int(complaint_id)}"


def scan_prefixes(organization_ids: Iterable[int]) -> list[str]:
    return [PREFIX]


# What the operation is, for the steps every fenced operation takes the same way.
ASSIGNMENT = FencedOperation(
    OPERATION, ASSIGN_PERMISSION, "VENDOR_LOCK_TTL_SECONDS", NotAllowed, LOCK_REFUSALS
)
