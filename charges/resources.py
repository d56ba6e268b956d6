"""The lock resource of a month's charges: ``monthly-charges:org:<org_id>:<YYYY-MM>``.

One lease per organization and month. The organization is in the name, so the lock status
page finds an organization's leases with one bounded SCAN of its prefix.
"""

import re
from collections.abc import Iterable
from datetime import date

OPERATION = "monthly-charges"
GENERATE_PERMISSION = "charges.generate_charges"
PREFIX = f"{OPERATION}:org:"
# Ids of at most 18 digits fit a bigint: a stray key with a longer number is no row of ours.
# Use with fullmatch(); [0-9], not \d, which also matches other scripts' digits.
RESOURCE = re.compile(r"monthly-charges:org:(?P<org>[0-9]{1,18}):(?P<month>[0-9]{4}-[0-9]{2})")


def charge_resource(organization, month: date) -> str:
    """The resource of ``organization``'s charges for ``month``."""
    return f"{PREFIX}{int(organization.pk)}:{month:%Y-%m}"


def scan_prefixes(organization_ids: Iterable[int]) -> list[str]:
    return [f"{PREFIX}{int(pk)}:" for pk in organization_ids]
