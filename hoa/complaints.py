"""The complaint workflow: statuses, the rules between them, notes and SLA changes.

``Complaint`` is a core model, so its workflow lives in the frame; its pages live with
the complaint pages, in the app above that assigns a vendor to a complaint. The frame
does not know who is assigned: a caller says whether the complaint has a vendor
(``has_vendor``), and the fenced assignment calls ``record_assignment`` inside its
transaction.

The statuses, in order (docs/staff-guide.md has the same table for people)::

    open ──(a vendor is assigned)──► assigned ──► in progress ──► resolved ──► closed
      │                                 │              │             │  ▲         │
      └──────────► resolved / closed ◄──┴──────────────┘             │  └─reopen──┘
                                                                      └─► reopen, back to work

==============  ==============================================  ========================
from            may go to                                        a note is required for
==============  ==============================================  ========================
open            resolved, closed                                  both
assigned        in progress, resolved, closed                     resolved, closed
in progress     resolved, closed                                  resolved, closed
resolved        closed, in progress (needs a vendor), reopen      in progress, reopen
closed          reopen only (closed is final otherwise)           reopen
==============  ==============================================  ========================

- ``assigned`` is never chosen by hand: assigning a vendor moves an ``open`` complaint to
  it (``record_assignment``); a complaint in a later status keeps its status.
- ``in progress`` needs a vendor: from ``open`` it is refused ("assign a vendor first").
- Resolving needs a note (what was done); closing a complaint that was not resolved needs
  a note (why it is closed without a fix: a duplicate, withdrawn…), which covers closing an
  unassigned high-priority complaint.
- Reopening (to ``open``) lands on ``assigned`` when the complaint has a vendor.
- Closing records who and when (``closed_by``, ``closed_at``); reopening clears them.
- A complaint is open for its SLA (``Complaint.OPEN_STATUSES``) until resolved or closed.

A status change is a compare-and-swap on the status the staff member saw
(``from_status``): one conditional ``UPDATE … WHERE status = <seen>``. Two people changing
the same complaint at once cannot both win; the loser gets ``StatusChanged`` (409) with the
status now, and nothing of theirs is written. Every change, note and SLA change is a
``ComplaintEvent`` written in the same transaction as the change.
"""

import logging
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from django.db import transaction
from django.utils import formats, timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from hoa.answers.refusals import Refusal, sentence
from hoa.answers.table import Answer, Audience
from hoa.models import Complaint, ComplaintEvent

__all__ = [
    "NOTE_MAX_LENGTH",
    "ComplaintsError",
    "StatusChanged",
    "TransitionRefused",
    "add_note",
    "change_sla",
    "change_status",
    "check_transition",
    "choices_from",
    "record_assignment",
]

logger = logging.getLogger(__name__)

Status = Complaint.Status
NOTE_MAX_LENGTH = 2000

# Where each status may go by hand (``assigned`` is reached by assigning a vendor only).
ALLOWED = {
    Status.OPEN: (Status.RESOLVED, Status.CLOSED),
    Status.ASSIGNED: (Status.IN_PROGRESS, Status.RESOLVED, Status.CLOSED),
    Status.IN_PROGRESS: (Status.RESOLVED, Status.CLOSED),
    Status.RESOLVED: (Status.CLOSED, Status.IN_PROGRESS, Status.OPEN),
    Status.CLOSED: (Status.OPEN,),
}
REOPENED_FROM = (Status.RESOLVED, Status.CLOSED)


# -- refusals -----------------------------------------------------------------------------


class Rule(StrEnum):
    """The rule a refused change breaks; its sentence is ``RULES[rule]``."""

    UNCHANGED = "unchanged"
    ASSIGNED_BY_HAND = "assigned-by-hand"
    CLOSED_IS_FINAL = "closed-is-final"
    NEEDS_VENDOR = "needs-vendor"
    NOT_FROM_HERE = "not-from-here"
    NOTE_TOO_LONG = "note-too-long"
    SAY_WHAT_WAS_DONE = "say-what-was-done"
    SAY_WHY_CLOSED = "say-why-closed"
    SAY_WHY_REOPENED = "say-why-reopened"
    SAY_WHY_RESTARTED = "say-why-restarted"
    UNKNOWN_STATUS = "unknown-status"
    EMPTY_NOTE = "empty-note"
    SAY_WHY_SLA_CHANGES = "say-why-sla-changes"
    REASON_TOO_LONG = "reason-too-long"
    NO_SLA_RUNNING = "no-sla-running"
    SLA_BEFORE_OPENING = "sla-before-opening"
    SLA_UNCHANGED = "sla-unchanged"


RULES = {
    Rule.UNCHANGED: gettext_lazy("The complaint is already %(to)s."),
    Rule.ASSIGNED_BY_HAND: gettext_lazy(
        "A complaint becomes assigned when a vendor is assigned to it, not by hand."
    ),
    Rule.CLOSED_IS_FINAL: gettext_lazy(
        "A closed complaint is final: it can only be reopened, with a note."
    ),
    Rule.NEEDS_VENDOR: gettext_lazy("Assign a vendor before marking the complaint in progress."),
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
}


class ComplaintsError(Refusal):
    """Base of what the workflow refuses on purpose; nothing was written."""


class TransitionRefused(ComplaintsError):
    """The change breaks ``rule``; ``facts`` fill its sentence (``RULES``). 400."""

    answer = Answer.BAD_REQUEST
    title = gettext_lazy("This change is not allowed")

    def __init__(self, rule: Rule, **facts):
        super().__init__(rule=rule, facts=facts)


class StatusChanged(ComplaintsError):
    """Someone changed the status since the page was shown (``seen``): it is ``current``
    now (``None``: the complaint is gone); 409."""

    answer = Answer.RETRY
    title = gettext_lazy("The status changed meanwhile")

    def __init__(self, *, complaint: Complaint, seen: str, current: str | None, wanted: str):
        super().__init__(complaint=complaint, seen=seen, current=current, wanted=wanted)


@sentence.register
def _sentence(refusal: ComplaintsError, audience: Audience) -> str:
    """What staff and operators read for a refusal of the workflow (the same)."""
    match refusal:
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
                "current": _label(refusal.current) if refusal.current else _("gone"),
                "seen": _label(refusal.seen),
            }
    raise TypeError(f"no sentence for {type(refusal).__name__}")


def _label(status: str) -> str:
    return str(Status(status).label).lower()


def _shown(name: str, value):
    if name in ("from", "to", "status"):
        return _label(value)
    if name == "opened":
        return formats.date_format(value, "Y-m-d H:i")
    return value


# -- the rules ----------------------------------------------------------------------------


def choices_from(status: str, *, has_vendor: bool) -> list[tuple[str, str]]:
    """The statuses the page offers from ``status``, labelled as actions."""
    offered = []
    for target in ALLOWED.get(status, ()):
        if target == Status.IN_PROGRESS and not has_vendor:
            continue
        label = _("Reopen") if target == Status.OPEN else Status(target).label
        offered.append((target.value, str(label)))
    return offered


def check_transition(
    *, complaint: Complaint, seen: str, to: str, note: str, has_vendor: bool
) -> str:
    """Return the status ``to`` lands on (reopening may land on ``assigned``), or raise
    ``TransitionRefused`` with the rule it breaks."""
    values = {"from": seen, "to": to}
    if to == seen:
        raise TransitionRefused(Rule.UNCHANGED, **values)
    if to == Status.ASSIGNED:
        raise TransitionRefused(Rule.ASSIGNED_BY_HAND)
    if seen == Status.CLOSED and to != Status.OPEN:
        raise TransitionRefused(Rule.CLOSED_IS_FINAL)
    if to == Status.IN_PROGRESS and not has_vendor:
        raise TransitionRefused(Rule.NEEDS_VENDOR)
    if to not in ALLOWED[seen]:
        raise TransitionRefused(Rule.NOT_FROM_HERE, **values)
    if len(note) > NOTE_MAX_LENGTH:
        raise TransitionRefused(Rule.NOTE_TOO_LONG, max=NOTE_MAX_LENGTH)
    if not note:
        if to == Status.RESOLVED:
            raise TransitionRefused(Rule.SAY_WHAT_WAS_DONE)
        if to == Status.CLOSED and seen != Status.RESOLVED:
            raise TransitionRefused(Rule.SAY_WHY_CLOSED)
        if to == Status.OPEN:
            raise TransitionRefused(Rule.SAY_WHY_REOPENED)
        if to == Status.IN_PROGRESS and seen == Status.RESOLVED:
            raise TransitionRefused(Rule.SAY_WHY_RESTARTED)
    if to == Status.OPEN and has_vendor:
        return Status.ASSIGNED
    return to


# -- the operations -----------------------------------------------------------------------


@dataclass(frozen=True)
class StatusChange:
    complaint: Complaint
    seen: str
    to: str
    event: ComplaintEvent

    @property
    def message(self) -> str:
        return _("Complaint #%(complaint)s is %(to)s now.") % {
            "complaint": self.complaint.pk,
            "to": _label(self.to),
        }


def change_status(
    *, complaint: Complaint, seen: str, to: str, note: str, actor, has_vendor: bool
) -> StatusChange:
    """Move ``complaint`` from the status the actor saw to ``to``, with a note, once."""
    note = note.strip()
    if seen not in Status.values or to not in Status.values:
        raise TransitionRefused(Rule.UNKNOWN_STATUS)
    lands_on = check_transition(
        complaint=complaint, seen=seen, to=to, note=note, has_vendor=has_vendor
    )
    now = timezone.now()
    closing = lands_on == Status.CLOSED
    with transaction.atomic():
        # The compare-and-swap: the database settles who changed it first.
        changed = Complaint.objects.filter(pk=complaint.pk, status=seen).update(
            status=lands_on,
            closed_at=now if closing else None,
            closed_by=actor if closing else None,
        )
        if changed != 1:
            current = Complaint.objects.filter(pk=complaint.pk).values_list("status", flat=True)
            raise StatusChanged(complaint=complaint, seen=seen, current=current.first(), wanted=to)
        event = ComplaintEvent.objects.create(
            complaint=complaint,
            kind=ComplaintEvent.Kind.STATUS_CHANGED,
            from_status=seen,
            to_status=lands_on,
            detail=note,
            actor=actor,
            actor_label=actor.get_username(),
            at=now,
        )
    complaint.status = lands_on
    complaint.closed_at, complaint.closed_by = (now, actor) if closing else (None, None)
    logger.info(
        "complaint status changed",
        extra={"complaint": complaint.pk, "from": seen, "to": lands_on, "actor": actor.pk},
    )
    return StatusChange(complaint=complaint, seen=seen, to=lands_on, event=event)


def add_note(*, complaint: Complaint, note: str, actor) -> ComplaintEvent:
    """Add a note to the complaint's timeline (any status, closed ones too)."""
    note = note.strip()
    if not note:
        raise TransitionRefused(Rule.EMPTY_NOTE)
    if len(note) > NOTE_MAX_LENGTH:
        raise TransitionRefused(Rule.NOTE_TOO_LONG, max=NOTE_MAX_LENGTH)
    return ComplaintEvent.objects.create(
        complaint=complaint,
        kind=ComplaintEvent.Kind.NOTE,
        detail=note,
        actor=actor,
        actor_label=actor.get_username(),
    )


def change_sla(*, complaint: Complaint, due_at: datetime, reason: str, actor) -> ComplaintEvent:
    """Move the complaint's SLA due time to ``due_at``, recording the old one and why.

    A breach the sweep recorded stays recorded (it happened, and the sweep records one per
    complaint); the pages compute "overdue" from the due time.
    """
    reason = reason.strip()
    if not reason:
        raise TransitionRefused(Rule.SAY_WHY_SLA_CHANGES)
    if len(reason) > NOTE_MAX_LENGTH:
        raise TransitionRefused(Rule.REASON_TOO_LONG, max=NOTE_MAX_LENGTH)
    with transaction.atomic():
        # The row lock orders this change after any status change or sweep batch in flight.
        locked = Complaint.objects.select_for_update().get(pk=complaint.pk)
        if not locked.is_open:
            raise TransitionRefused(Rule.NO_SLA_RUNNING, status=locked.status)
        if due_at <= locked.opened_at:
            raise TransitionRefused(Rule.SLA_BEFORE_OPENING, opened=locked.opened_at)
        if due_at == locked.sla_due_at:
            raise TransitionRefused(Rule.SLA_UNCHANGED)
        Complaint.objects.filter(pk=complaint.pk).update(sla_due_at=due_at)
        event = ComplaintEvent.objects.create(
            complaint=complaint,
            kind=ComplaintEvent.Kind.SLA_CHANGED,
            old_due_at=locked.sla_due_at,
            new_due_at=due_at,
            detail=reason,
            actor=actor,
            actor_label=actor.get_username(),
        )
    complaint.sla_due_at = due_at
    logger.info(
        "complaint SLA changed",
        extra={"complaint": complaint.pk, "due_at": due_at.isoformat(), "actor": actor.pk},
    )
    return event


def record_assignment(
    *,
    complaint: Complaint,
    actor,
    actor_label: str,
    note: str,
    at: datetime,
    status: str | None = None,
) -> bool:
    """Move an ``open`` complaint to ``assigned``, inside the caller's transaction (the
    fenced assignment's); return whether it moved. A later status is kept.

    ``status`` is the complaint's status if the caller read it in this transaction while
    holding the complaint's row lock (the fence UPDATE takes it): then nobody can change
    it before the commit, and a complaint that is not open costs no statement. Without
    it, the conditional UPDATE finds out.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("record_assignment runs inside the assignment's transaction")
    if status is not None and status != Status.OPEN:
        return False
    moved = Complaint.objects.filter(pk=complaint.pk, status=Status.OPEN).update(
        status=Status.ASSIGNED
    )
    if moved:
        ComplaintEvent.objects.create(
            complaint=complaint,
            kind=ComplaintEvent.Kind.STATUS_CHANGED,
            from_status=Status.OPEN,
            to_status=Status.ASSIGNED,
            detail=note,
            actor=actor,
            actor_label=actor_label,
            at=at,
        )
        complaint.status = Status.ASSIGNED
    return bool(moved)
