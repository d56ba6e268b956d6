"""How each answer of ``assign_vendor`` reads to a person, in one place for the staff page,
the admin action and the command."""

from django.utils import formats
from django.utils.translation import gettext as _

from hoa.models import Complaint
from locking import LockHeld, LockUnavailable, StaleFencingToken
from vendors.models import VendorAssignment
from vendors.services import (
    AlreadyAssigned,
    AssignmentChanged,
    AssignmentResult,
    ChangedSinceViewed,
    ContractNotActive,
    DispatchFailed,
    NotAllowed,
)

# Refusals a caller answers with "try again later" (409 / exit 75 / admin warning).
RETRYABLE = (LockHeld, StaleFencingToken, AlreadyAssigned, ChangedSinceViewed, AssignmentChanged)
# Refusals caused by the request itself (400 / exit 1 / admin error).
BAD_REQUEST = (ContractNotActive, NotAllowed)


def describe_assignment(assignment: VendorAssignment) -> str:
    """``Pipe Pros, assigned by alice on 2026-03-01 10:00 (token 7)``."""
    return _("%(vendor)s, assigned by %(actor)s on %(at)s (token %(token)s)") % {
        "vendor": assignment.vendor.name,
        "actor": assignment.actor_label or _("unknown"),
        "at": formats.date_format(assignment.assigned_at, "Y-m-d H:i"),
        "token": assignment.fence_token,
    }


def result_message(result: AssignmentResult) -> str:
    complaint = result.assignment.complaint
    values = {"vendor": result.assignment.vendor.name, "complaint": complaint.pk}
    if result.already_done:
        return _("%(vendor)s is already the vendor of complaint #%(complaint)s.") % values
    if result.replaced is not None:
        return _(
            "%(vendor)s now handles complaint #%(complaint)s, replacing %(previous)s "
            "(token %(token)s)."
        ) % {**values, "previous": result.replaced.vendor.name, "token": result.token}
    return _("%(vendor)s is assigned to complaint #%(complaint)s (token %(token)s).") % {
        **values,
        "token": result.token,
    }


def refusal_message(complaint: Complaint, exc: Exception) -> str:
    """One line saying why nothing was written and what to do."""
    number = complaint.pk
    if isinstance(exc, LockHeld):
        return _(
            "Complaint #%(complaint)s is being assigned by %(holder)s right now; "
            "try again in %(seconds)s seconds."
        ) % {
            "complaint": number,
            "holder": exc.holder or _("another worker"),
            "seconds": max(1, round(exc.retry_after.total_seconds())),
        }
    if isinstance(exc, StaleFencingToken):
        return _(
            "A newer assignment of complaint #%(complaint)s (token %(recorded)s) took over "
            "while this one (token %(token)s) was waiting; nothing of this one was saved."
        ) % {"complaint": number, "recorded": exc.recorded, "token": exc.token}
    if isinstance(exc, AlreadyAssigned):
        return _(
            "Complaint #%(complaint)s already has a vendor: %(winner)s. Reassign to replace them."
        ) % {"complaint": number, "winner": describe_assignment(exc.winner)}
    if isinstance(exc, ChangedSinceViewed):
        if exc.current is None:
            return _(
                "Complaint #%(complaint)s changed since you looked: it has no vendor now; "
                "nothing was saved. Run again to assign one knowingly."
            ) % {"complaint": number}
        return _(
            "Complaint #%(complaint)s changed since you looked: %(vendor)s is now assigned "
            "(token %(token)s); nothing was saved. Run again to replace it knowingly."
        ) % {
            "complaint": number,
            "vendor": exc.current.vendor.name,
            "token": exc.current.fence_token,
        }
    if isinstance(exc, AssignmentChanged):
        now = describe_assignment(exc.current) if exc.current else _("no vendor")
        return _(
            "The vendor of complaint #%(complaint)s changed while you were assigning "
            "(now: %(now)s); nothing was saved. Try again."
        ) % {"complaint": number, "now": now}
    if isinstance(exc, ContractNotActive):
        values = {"vendor": exc.vendor.name, "organization": exc.organization.name}
        if exc.contract is None:
            return _("%(vendor)s has no contract with %(organization)s.") % values
        if exc.starts_later:
            return _("%(vendor)s's contract with %(organization)s starts on %(day)s.") % {
                **values,
                "day": exc.contract.starts_on.isoformat(),
            }
        return _("%(vendor)s's contract with %(organization)s ended on %(day)s.") % {
            **values,
            "day": exc.contract.ends_on.isoformat(),
        }
    if isinstance(exc, NotAllowed):
        return _("You may not assign vendors for %(organization)s.") % {
            "organization": exc.organization.name
        }
    if isinstance(exc, DispatchFailed):
        return _(
            "The vendor dispatch service did not accept the assignment (%(reason)s); "
            "nothing was saved. Try again later."
        ) % {"reason": exc.reason}
    if isinstance(exc, LockUnavailable):
        return _("The lock service is unavailable (%(reason)s); nothing was saved.") % {
            "reason": exc.reason
        }
    raise TypeError(f"no message for {exc.__class__.__name__}")
