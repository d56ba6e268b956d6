"""How each answer of vendor assignment reads to a person: one place for the staff page,
the admin action and the command. Translated, with named placeholders.

``refusal_sentence`` renders the refusals of vendor assignment's own rules
(``vendors.exceptions``) from their facts, when an edge asks; the kinds every operation
shares the frame says (``hoa.answers.sentences``), in the words of ``WORDS``. The refusals
decided at commit speak to two audiences (``hoa.answers.table.Audience``): staff on pages
and admin messages, without fencing tokens, hosts or lease lifetimes; operators in the
command's output and the audit, with them.
"""

from datetime import date
from typing import TYPE_CHECKING

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from hoa.answers.refusals import Refusal, sentence
from hoa.answers.sentences import Words
from hoa.answers.table import Audience
from hoa.dates import when
from hoa.models import Complaint, Organization
from vendors.dispatch import DISPATCH_SERVICE
from vendors.exceptions import (
    AlreadyAssigned,
    AssignmentChanged,
    CertificateChanged,
    CertificateNotAllowed,
    CertificateOutOfRange,
    ChangedSinceViewed,
    ClosedSinceViewed,
    ComplaintClosed,
    ContractNotActive,
    VendorNotInsured,
    VendorsError,
)
from vendors.models import Vendor, VendorAssignment, VendorContract

if TYPE_CHECKING:
    from vendors.services import AssignmentResult

# Its words in the refusals every operation shares, which the frame says.
WORDS = Words(
    doing=lambda refusal: (
        _("assigning a vendor to complaint #%(complaint)s") % {"complaint": refusal.complaint.pk}
    ),
    may=gettext_lazy("assign vendors for %(organization)s"),
    party=DISPATCH_SERVICE,
)


@sentence.register(VendorsError)
def refusal_sentence(refusal: Refusal, audience: Audience) -> str:
    """What ``audience`` reads for a refusal of vendor assignment's own rules."""
    match refusal:
        case ContractNotActive():
            return contract_not_active(
                refusal.vendor, refusal.organization, refusal.day, refusal.contract
            )
        case VendorNotInsured():
            return not_insured(refusal.vendor, refusal.organization, refusal.insured_until)
        case CertificateNotAllowed():
            return _(
                "%(actor)s may not record insurance certificates of %(organization)s's vendors."
            ) % {"actor": refusal.actor, "organization": refusal.organization.name}
        case CertificateOutOfRange():
            return _("The expiry date must be between %(earliest)s and %(latest)s.") % {
                "earliest": refusal.earliest.isoformat(),
                "latest": refusal.latest.isoformat(),
            }
        case CertificateChanged():
            return certificate_changed(refusal.current)
        case AlreadyAssigned():
            return already_assigned(refusal.complaint, refusal.winner, audience=audience)
        case ChangedSinceViewed():
            return changed_since_viewed(refusal.complaint, refusal.current, audience=audience)
        case AssignmentChanged():
            return assignment_changed(refusal.complaint, refusal.current, audience=audience)
        case ComplaintClosed():
            return _(
                "Complaint #%(complaint)s is closed, and a closed complaint gets no vendor. "
                "Reopen it first if it needs one."
            ) % {"complaint": refusal.complaint.pk}
        case ClosedSinceViewed():
            return _(
                "Complaint #%(complaint)s was closed since you looked, so no vendor was "
                "assigned; nothing was saved. Reopen it first if it needs one."
            ) % {"complaint": refusal.complaint.pk}
    raise TypeError(f"no sentence for {type(refusal).__name__}")


def describe_assignment(
    assignment: VendorAssignment, *, audience: Audience = Audience.STAFF
) -> str:
    """``Pipe Pros, assigned by alice on 2026-03-01 10:00``; for operators, with the audit's
    actor label and ``(token 7)``."""
    values = {
        "vendor": assignment.vendor.name,
        "at": when(assignment.assigned_at),
    }
    if audience is Audience.OPERATORS:
        return _("%(vendor)s, assigned by %(actor)s on %(at)s (token %(token)s)") % {
            **values,
            "actor": assignment.actor_label or _("unknown"),
            "token": assignment.fence_token,
        }
    if assignment.assigned_by_id is None:  # a command run without --actor
        return _("%(vendor)s, assigned by an operator on %(at)s") % values
    return _("%(vendor)s, assigned by %(actor)s on %(at)s") % {
        **values,
        "actor": assignment.assigned_by.get_username(),
    }


def result_message(result: "AssignmentResult", audience: Audience = Audience.STAFF) -> str:
    """What a successful call did; operators (the command's line) also read the token."""
    assignment, already_done, replaced = result.row, not result.committed, result.replaced
    values = {"vendor": assignment.vendor.name, "complaint": assignment.complaint_id}
    if already_done:
        said = _("%(vendor)s is already the vendor of complaint #%(complaint)s.") % values
    elif replaced is not None:
        said = _("%(vendor)s now handles complaint #%(complaint)s, replacing %(previous)s.") % {
            **values,
            "previous": replaced.vendor.name,
        }
    else:
        said = _("%(vendor)s is assigned to complaint #%(complaint)s.") % values
    if audience is Audience.OPERATORS and not already_done:
        said = f"{said[:-1]} (token {assignment.fence_token})."
    return said


def assigned_note(assignment: VendorAssignment) -> str:
    """The note of the status change an assignment makes (open to assigned): staff read it
    on the timeline, so it names the vendor, not the token (the assignment keeps that)."""
    return _("%(vendor)s assigned.") % {"vendor": assignment.vendor.name}


def contract_not_active(
    vendor: Vendor, organization: Organization, day: date, contract: VendorContract | None
) -> str:
    values = {"vendor": vendor.name, "organization": organization.name}
    if contract is None:
        return _("%(vendor)s has no contract with %(organization)s.") % values
    if contract.starts_on > day:  # the next to start
        return _("%(vendor)s's contract with %(organization)s starts on %(day)s.") % {
            **values,
            "day": contract.starts_on.isoformat(),
        }
    return _("%(vendor)s's contract with %(organization)s ended on %(day)s.") % {
        **values,
        "day": contract.ends_on.isoformat(),
    }


def not_insured(vendor: Vendor, organization: Organization, insured_until: date | None) -> str:
    """An uninsured vendor, refused by assignment and by payment alike."""
    values = {"vendor": vendor.name, "organization": organization.name}
    if insured_until is None:
        return (
            _(
                "%(vendor)s has no insurance certificate on file with %(organization)s: record "
                "its expiry on the vendor's contract before assigning or paying them."
            )
            % values
        )
    return _(
        "%(vendor)s's insurance certificate with %(organization)s lapsed on %(day)s: record "
        "the new certificate on the vendor's contract before assigning or paying them."
    ) % {**values, "day": insured_until.isoformat()}


def certificate_changed(current: VendorContract) -> str:
    """Someone recorded another certificate on the contract since the page was shown."""
    values = {
        "vendor": current.vendor.name,
        "start": current.starts_on.isoformat(),
        "end": current.ends_on.isoformat(),
    }
    if current.insurance_expires_on is None:
        said = _(
            "The insurance certificate on %(vendor)s's contract (%(start)s to %(end)s) changed "
            "since you looked: none is on file now; nothing was saved."
        )
    else:
        said = _(
            "The insurance certificate on %(vendor)s's contract (%(start)s to %(end)s) changed "
            "since you looked: it now expires on %(day)s; nothing was saved."
        )
        values["day"] = current.insurance_expires_on.isoformat()
    return (said % values) + " " + _("Look at the vendor's insurance again and decide.")


def certificate_message(record) -> str:
    """What recording a certificate did (``CertificateRecorded``), for the page's message."""
    contract = record.contract
    return _(
        "Recorded %(vendor)s's insurance certificate, expiring on %(day)s, on their contract "
        "(%(start)s to %(end)s)."
    ) % {
        "vendor": contract.vendor.name,
        "day": record.expires_on.isoformat(),
        "start": contract.starts_on.isoformat(),
        "end": contract.ends_on.isoformat(),
    }


def already_assigned(
    complaint: Complaint, winner: VendorAssignment, *, audience: Audience = Audience.STAFF
) -> str:
    return _(
        "Complaint #%(complaint)s already has a vendor: %(winner)s. Reassign to replace them."
    ) % {"complaint": complaint.pk, "winner": describe_assignment(winner, audience=audience)}


def changed_since_viewed(
    complaint: Complaint,
    current: VendorAssignment | None,
    *,
    audience: Audience = Audience.STAFF,
) -> str:
    if current is None:
        return _(
            "Complaint #%(complaint)s changed since you looked: it has no vendor now; "
            "nothing was saved. Run again to assign one knowingly."
        ) % {"complaint": complaint.pk}
    if audience is Audience.OPERATORS:
        return _(
            "Complaint #%(complaint)s changed since you looked: %(vendor)s is now assigned "
            "(token %(token)s); nothing was saved. Run again to replace it knowingly."
        ) % {
            "complaint": complaint.pk,
            "vendor": current.vendor.name,
            "token": current.fence_token,
        }
    return _(
        "Complaint #%(complaint)s changed since you looked: %(vendor)s is now assigned; "
        "nothing was saved. Run again to replace it knowingly."
    ) % {"complaint": complaint.pk, "vendor": current.vendor.name}


def assignment_changed(
    complaint: Complaint,
    current: VendorAssignment | None,
    *,
    audience: Audience = Audience.STAFF,
) -> str:
    now = describe_assignment(current, audience=audience) if current else _("no vendor")
    return _(
        "The vendor of complaint #%(complaint)s changed while you were assigning "
        "(now: %(now)s); nothing was saved. Try again."
    ) % {"complaint": complaint.pk, "now": now}


# -- the staff page's 409, which offers to retry knowingly --------------------------------


def conflict_message(refusal: Refusal, vendor: Vendor) -> str:
    """What the staff page's 409 says above its retry button."""
    match refusal:
        case AlreadyAssigned():
            return retry_already_assigned(vendor)
        case ChangedSinceViewed():
            return retry_changed_since_viewed(vendor, refusal.current)
    return refusal.message


def current_vendor(assignment: VendorAssignment) -> str:
    return _("Current vendor: %(assignment)s.") % {"assignment": describe_assignment(assignment)}


def retry_already_assigned(vendor: Vendor) -> str:
    return _(
        "Nothing was changed. To send %(vendor)s instead, tick “replace the current "
        "vendor” and try again."
    ) % {"vendor": vendor.name}


def retry_changed_since_viewed(vendor: Vendor, current: VendorAssignment | None) -> str:
    if current is None:
        return _(
            "Nothing was changed: the vendor you saw is no longer assigned, and the complaint "
            "has no vendor now. Try again to send %(vendor)s knowingly."
        ) % {"vendor": vendor.name}
    return _(
        "Nothing was changed: since you looked, %(current)s has been assigned. Try again to "
        "replace %(current)s with %(vendor)s knowingly."
    ) % {"current": current.vendor.name, "vendor": vendor.name}
