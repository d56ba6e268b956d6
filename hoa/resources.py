"""Lock resource names of the fenced operations, defined once.

The services build them, the lock status page parses them back to decide who may see a
lease. The locking app only validates names; their meaning lives here.
"""

import re
from datetime import date

CHARGES_PREFIX = "monthly-charges:org:"
VENDOR_PREFIX = "vendor-assignment:complaint:"

# Ids of at most 18 digits fit a bigint: a stray key with a longer number is no row of ours.
# Use with fullmatch(); [0-9], not \d, which also matches other scripts' digits.
CHARGES_RESOURCE = re.compile(
    r"monthly-charges:org:(?P<org>[0-9]{1,18}):(?P<month>[0-9]{4}-[0-9]{2})"
)
VENDOR_RESOURCE = re.compile(r"vendor-assignment:complaint:(?P<complaint>[0-9]{1,18})")


def charges_resource(organization_id: int, month: date) -> str:
    """``monthly-charges:org:<org_id>:<YYYY-MM>``: one lease per organization and month."""
    return f"{CHARGES_PREFIX}{int(organization_id)}:{month:%Y-%m}"


def assignment_resource(complaint_id: int) -> str:
    """``vendor-assignment:complaint:<id>``: one lease per complaint, never wider."""
    return f"{VENDOR_PREFIX}{int(complaint_id)}"
