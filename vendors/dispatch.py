"""The vendor dispatch client: tell the dispatch service which vendor goes to a complaint.

One sealed POST per fenced attempt, before its transaction, to ``VENDOR_DISPATCH_URL``
(skipped when unset), its ``Idempotency-Key`` naming the change (the complaint's latest
assignment and close it saw), its ``X-Fencing-Token`` the lease's; and the best-effort
cancellation of a dispatch made in vain, at ``<VENDOR_DISPATCH_URL>/cancel``.
docs/design.md, "The dispatch call and its idempotency key", says why each is so.
"""

from enum import StrEnum
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.utils.translation import gettext_lazy

from hoa.integrations.webhooks import CallResult, post_fenced
from hoa.models import Complaint
from vendors.models import Vendor, VendorAssignment

# Whom a dispatch tells, as staff read it.
DISPATCH_SERVICE = gettext_lazy("the dispatch service")

# The endpoints the calls are sealed for: the dispatch service's receivers' scopes.
DISPATCH_ENDPOINT = "dispatch"
CANCEL_ENDPOINT = "dispatch-cancel"


def idempotency_key(
    *, complaint_id: int, vendor_id: int, replacing_id: int | None, closed_id: int | None = None
) -> str:
    """Return the key naming one change of a complaint's vendor: after its latest
    assignment (``replacing_id``) and, once it has been closed, after its latest close
    (``closed_id``, that close's event)."""
    replacing = replacing_id if replacing_id is not None else "none"
    key = f"vendor-assignment:{complaint_id}:{vendor_id}:replacing:{replacing}"
    return f"{key}:closed:{closed_id}" if closed_id is not None else key


def dispatch_payload(
    *, complaint: Complaint, vendor: Vendor, replacing: VendorAssignment | None
) -> dict:
    """Return the JSON body: the same for every try of the same change (no clock values)."""
    organization = complaint.organization
    return {
        "event": "vendor.assigned",
        "organization": {
            "id": organization.pk,
            "slug": organization.slug,
            "name": organization.name,
        },
        "complaint": {
            "id": complaint.pk,
            "title": complaint.title,
            "priority": complaint.priority,
            "unit": complaint.unit.label if complaint.unit_id else None,
            "sla_due_at": complaint.sla_due_at,
        },
        "vendor": {
            "id": vendor.pk,
            "name": vendor.name,
            "trade": vendor.trade,
            "email": vendor.email,
        },
        "replacing": (
            {"assignment": replacing.pk, "vendor": replacing.vendor_id} if replacing else None
        ),
    }


def dispatch_assignment(
    *,
    complaint: Complaint,
    vendor: Vendor,
    replacing: VendorAssignment | None,
    after_id: int | None,
    closed_id: int | None,
    token,
) -> CallResult:
    """POST the assignment once with the fencing headers, under ``token`` (the lease); raise
    ``ExternalCallFailed``. ``after_id``: the complaint's latest assignment (``replacing``'s
    id when one is active), ``closed_id``: its latest close (its event), which the key
    names."""
    return post_fenced(
        settings.VENDOR_DISPATCH_URL,
        dispatch_payload(complaint=complaint, vendor=vendor, replacing=replacing),
        idempotency_key=idempotency_key(
            complaint_id=complaint.pk,
            vendor_id=vendor.pk,
            replacing_id=after_id,
            closed_id=closed_id,
        ),
        token=token,
        endpoint=DISPATCH_ENDPOINT,
    )


def cancel_url(dispatch_url: str) -> str:
    """Return the cancellation endpoint: the dispatch URL's path followed by ``/cancel``."""
    parts = urlsplit(dispatch_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/cancel"))


class CancelReason(StrEnum):
    """Why a dispatch is taken back (the cancellation's ``"reason"``)."""

    REFUSED = "refused-at-commit"  # the attempt that dispatched was refused at its commit
    CLOSED = "complaint-closed"  # the complaint was closed while this vendor had it


def cancel_payload(
    *,
    complaint: Complaint,
    vendor: Vendor,
    replacing: VendorAssignment | None,
    now_assigned: VendorAssignment | None,
    reason: CancelReason,
) -> dict:
    """Return the JSON body of a cancellation: which dispatch, why, and who has the
    complaint now."""
    return {
        "event": "vendor.assignment_cancelled",
        "action": "cancel",
        "reason": reason,
        "complaint": {"id": complaint.pk, "organization": complaint.organization_id},
        "vendor": {"id": vendor.pk, "name": vendor.name},
        "replacing": (
            {"assignment": replacing.pk, "vendor": replacing.vendor_id} if replacing else None
        ),
        "now_assigned": (
            {"assignment": now_assigned.pk, "vendor": now_assigned.vendor_id}
            if now_assigned
            else None
        ),
    }


def cancel_dispatch(
    *,
    complaint: Complaint,
    vendor: Vendor,
    replacing: VendorAssignment | None,
    after_id: int | None,
    closed_id: int | None,
    now_assigned: VendorAssignment | None,
    reason: CancelReason,
    token,
) -> CallResult:
    """POST the cancellation of the dispatch ``dispatch_assignment`` made with the same
    arguments and token; raise ``ExternalCallFailed``."""
    url = settings.VENDOR_DISPATCH_URL
    return post_fenced(
        cancel_url(url) if url else "",
        cancel_payload(
            complaint=complaint,
            vendor=vendor,
            replacing=replacing,
            now_assigned=now_assigned,
            reason=reason,
        ),
        idempotency_key=idempotency_key(
            complaint_id=complaint.pk,
            vendor_id=vendor.pk,
            replacing_id=after_id,
            closed_id=closed_id,
        ),
        token=token,
        endpoint=CANCEL_ENDPOINT,
    )
