"""How the complaint workflow's answers read: its refusals' sentences and its results'.

Translated, with named placeholders. Staff and operators read the same sentences: the
workflow has no tokens or hosts to hide.
"""

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from hoa.answers.refusals import sentence
from hoa.answers.table import Audience
from hoa.complaints.exceptions import (
    ComplaintsError,
    Rule,
    SlaChanged,
    StatusChanged,
    TransitionRefused,
)
from hoa.complaints.extensions import assignment_guard
from hoa.dates import when
from hoa.models import Complaint

Status = Complaint.Status

RULES = {
    Rule.UNCHANGED: gettext_lazy("The complaint is already %(to)s."),
    Rule.ASSIGNED_BY_HAND: gettext_lazy(
        "A complaint becomes assigned when a vendor is assigned to it, not by hand."
    ),
    Rule.CLOSED_IS_FINAL: gettext_lazy(
        "A closed complaint is final: it can only be reopened, with a note."
    ),
    Rule.NOT_FROM_HERE: gettext_lazy("A complaint that is %(from)s cannot become %(to)s."),
    Rule.NOTE_TOO_LONG: gettext_lazy("Keep the note under %(max)s characters."),
    Rule.SAY_WHAT_WAS_DONE: gettext_lazy("Say in a note what was done to resolve the complaint."),
    Rule.SAY_WHY_CLOSED: gettext_lazy(
        "Say in a note why the complaint is closed without being resolved."
    ),
    Rule.SAY_WHY_REOPENED: gettext_lazy("Say in a note why the complaint is reopened."),
    Rule.SAY_WHY_RESTARTED: gettext_lazy("Say in a note why work on the complaint starts again."),
    Rule.UNKNOWN_STATUS: gettext_lazy("Choose a status from the list."),
    Rule.EMPTY_NOTE: gettext_lazy("Write the note first."),
    Rule.SAY_WHY_SLA_CHANGES: gettext_lazy("Say why the SLA due time changes."),
    Rule.REASON_TOO_LONG: gettext_lazy("Keep the reason under %(max)s characters."),
    Rule.NO_SLA_RUNNING: gettext_lazy(
        "A %(status)s complaint has no SLA running; reopen it first."
    ),
    Rule.SLA_BEFORE_OPENING: gettext_lazy(
        "The SLA due time must be after the complaint was opened (%(opened)s)."
    ),
    Rule.SLA_UNCHANGED: gettext_lazy("The SLA is already due then."),
    Rule.SLA_TOO_FAR: gettext_lazy(
        "The SLA due time must be at most a year ahead (by %(latest)s)."
    ),
}


@sentence.register
def _sentence(refusal: ComplaintsError, audience: Audience) -> str:
    """What staff and operators read for a refusal of the workflow (the same)."""
    match refusal:
        case TransitionRefused(rule=Rule.NEEDS_ASSIGNEE):
            return str(assignment_guard().needed)
        case TransitionRefused():
            return RULES[refusal.rule] % {
                name: _shown(name, value) for name, value in refusal.facts.items()
            }
        case StatusChanged():
            return _(
                "Complaint #%(complaint)s changed since you looked: it is %(current)s now, "
                "not %(seen)s; nothing was saved. Reload it, or try again to apply your "
                "change to the status it has now."
            ) % {
                "complaint": refusal.complaint.pk,
                "current": label(refusal.current) if refusal.current else _("gone"),
                "seen": label(refusal.seen),
            }
        case SlaChanged():
            return _(
                "The SLA of complaint #%(complaint)s was changed since you looked: it is due "
                "%(due)s now; nothing was saved. Reload it and decide again."
            ) % {"complaint": refusal.complaint.pk, "due": when(refusal.current)}
    raise TypeError(f"no sentence for {type(refusal).__name__}")


def label(status: str) -> str:
    """A status as a sentence names it: ``in progress``."""
    return str(Status(status).label).lower()


def _shown(name: str, value):
    if name in ("from", "to", "status"):
        return label(value)
    if name in ("opened", "latest"):
        return when(value)
    return value


def status_changed(complaint: Complaint, to: str) -> str:
    return _("Complaint #%(complaint)s is %(to)s now.") % {
        "complaint": complaint.pk,
        "to": label(to),
    }


def opened(complaint: Complaint) -> str:
    return _("Complaint #%(complaint)s is open; its SLA is due %(due)s.") % {
        "complaint": complaint.pk,
        "due": when(complaint.sla_due_at),
    }
