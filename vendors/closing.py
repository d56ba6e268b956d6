"""What closing a complaint does to its vendor: the assignment ends, and the vendor is told.

``end_on_close`` runs in the close's transaction, under the complaint's row lock (this app's
``AssignmentGuard``'s ``on_close``): the active assignment ends at the close's time. After the
commit the vendor's dispatch gets the best-effort cancellation (``"reason":
"complaint-closed"``). Why: docs/architecture.md, "Closing ends the assignment".
"""

import logging

from hoa.integrations.webhooks import ExternalCallFailed
from hoa.models import Complaint
from hoa.transactions import on_commit_robust
from locking import FencingToken
from locking.receiving import StaleAtReceiver
from vendors.dispatch import CancelReason, cancel_dispatch
from vendors.models import VendorAssignment
from vendors.resources import assignment_resource
from vendors.selectors import closes_of

logger = logging.getLogger(__name__)

Ended = VendorAssignment.Ended


def end_on_close(complaint: Complaint, *, at, actor) -> None:
    """End ``complaint``'s active assignment at ``at``, in the close's transaction, and
    tell its vendor once the close has committed."""
    ended = VendorAssignment.objects.end_active(complaint.pk, at=at, because=Ended.CLOSED)
    if ended is not None:
        on_commit_robust(tell_vendor_closed, ended)


def tell_vendor_closed(assignment_id: int) -> str:
    """Send the cancellation of the dispatch of assignment ``assignment_id``, ended by its
    complaint's close; say what it got (logged). Never raises for the call's failure."""
    assignment = VendorAssignment.objects.select_related("vendor", "complaint__organization").get(
        pk=assignment_id
    )
    complaint = assignment.complaint
    # The dispatch's key named the complaint's assignment before this one; its payload,
    # the one it replaced (none when that one had ended with a close).
    before = complaint.assignments.filter(pk__lt=assignment.pk).order_by("-pk").first()
    replaced = before if before is not None and before.ended_because == Ended.REPLACED else None
    # And the complaint's latest close before it was assigned: what its look read (a close
    # between the look and the commit would have refused the assignment).
    closed_id = closes_of(complaint).filter(at__lt=assignment.assigned_at).first()
    facts = {"complaint": complaint.pk, "token": assignment.fence_token}
    try:
        call = cancel_dispatch(
            complaint=complaint,
            vendor=assignment.vendor,
            replacing=replaced,
            after_id=before.pk if before is not None else None,
            closed_id=closed_id["pk"] if closed_id is not None else None,
            now_assigned=None,
            reason=CancelReason.CLOSED,
            token=_token_of(assignment),
        )
    except ExternalCallFailed as exc:
        logger.warning(
            "closed complaint's vendor not told: %s",
            exc.reason,
            extra={**facts, "outcome": "failed"},
        )
        return f"cancellation failed: {exc.reason}"
    except StaleAtReceiver as exc:  # the dispatch service has a newer call for the key
        logger.warning(
            "closed complaint's vendor: cancellation refused as stale (%s)",
            exc,
            extra={**facts, "outcome": "stale"},
        )
        return f"cancellation refused as stale ({exc})"
    said = (
        "cancellation skipped: no dispatch URL configured"
        if call.skipped
        else f"cancellation sent (HTTP {call.status})"
    )
    logger.info("closed complaint's vendor told: %s", said, extra={**facts, "outcome": "sent"})
    return said


def _token_of(assignment: VendorAssignment) -> FencingToken:
    """The token the assignment was made under, as the value a call is sealed with. A close
    holds no lease: the cancellation goes out under the token of the grant that made the
    assignment (the dispatch service refuses it as stale if a newer one has called). The
    grant's owner id was not kept with the assignment, so the assignment names it; the
    value seals this call and is never given to a fence."""
    return FencingToken(
        assignment_resource(assignment.complaint_id),
        assignment.fence_token,
        f"assignment:{assignment.pk}",
    )
