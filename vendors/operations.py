"""Vendor assignment, declared once: what the frame and the runner know of it.

The lock resource is ``vendor-assignment:complaint:<id>``: one lease per complaint, never
wider. The organization is the complaint's, not in the name, so the lock status page scans
the one prefix (bounded) and keeps the leases of the viewer's complaints.
``VendorsConfig.ready()`` registers ``ASSIGNMENT``.
"""

import re
from collections.abc import Iterable
from datetime import timedelta

from django.utils.translation import gettext_lazy as _

from hoa.operations import AdminExtension, FencedOperation, Link, Refusals
from vendors import complaint_pages, demo, selectors
from vendors.exceptions import (
    AssignmentBusy,
    AssignmentLeaseLost,
    AssignmentSuperseded,
    DispatchFailed,
    LockServiceUnavailable,
    NotAllowed,
)

OPERATION = "vendor-assignment"
ASSIGN_PERMISSION = complaint_pages.ASSIGN_PERMISSION
PREFIX = f"{OPERATION}:complaint:"


def assignment_resource(complaint_id: int) -> str:
    return f"{PREFIX}{int(complaint_id)}"


def scan_prefixes(organization_ids: Iterable[int]) -> list[str]:
    return [PREFIX]


ASSIGNMENT = FencedOperation(
    name=OPERATION,
    permission=ASSIGN_PERMISSION,
    # Ids of at most 18 digits fit a bigint; [0-9], not \d (other scripts' digits).
    resource=re.compile(r"vendor-assignment:complaint:(?P<complaint>[0-9]{1,18})"),
    example=f"{PREFIX}1",
    refusals=Refusals(
        not_permitted=NotAllowed,
        busy=AssignmentBusy,
        superseded=AssignmentSuperseded,
        lease_ran_out=AssignmentLeaseLost,
        lock_service_down=LockServiceUnavailable,
        call_failed=DispatchFailed,
    ),
    ttl=timedelta(seconds=30),
    ttl_setting="VENDOR_LOCK_TTL_SECONDS",
    describe=selectors.describe_resources,
    scan_prefixes=scan_prefixes,
    order=10,
    links=(Link(_("Vendors"), "vendors:vendors", order=30),),
    complaints=complaint_pages.COMPLAINTS,
    admin=(
        AdminExtension(
            "hoa.Complaint",
            actions=("vendors.admin.assign_vendor",),
            columns=("vendors.admin.current_vendor",),
            inlines=("vendors.admin.VendorAssignmentInline",),
            queryset="vendors.selectors.with_current_vendor",
        ),
    ),
    staff_permissions=(
        *(f"vendors.view_{model}" for model in ("vendor", "vendorcontract", "vendorassignment")),
        # The invoice workflow (vendors.invoices), until payment declares its own.
        "vendors.view_invoice",
        "vendors.add_invoice",
        "vendors.change_invoice",
        "vendors.approve_invoice",
        "vendors.void_invoice",
    ),
    seed_demo=demo.seed_demo,
)
