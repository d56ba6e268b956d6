"""The complaint workflow: its rules, its changes (status, notes, SLA), and what each tells
the reporter.

**The rules** in one place: which change may run in which status (``RULES``) and where a
status change may go (``MOVES``). The pages, the admin's actions, the commands and the
services read them; each change checks them under the complaint's row lock, in the
transaction that writes. docs/staff-guide.md, "Statuses", has the same tables for people (a
test keeps them in step); docs/architecture.md, "Invariants between operations on one
complaint", says why it holds.

**The changes.** A status change is a compare-and-swap on the status the staff member saw,
under the complaint's row lock (the loser gets ``StatusChanged``, 409). Who can be assigned
is not known here: an operation declares an ``AssignmentGuard``
(``hoa.complaints.extensions``). The statuses for people: docs/staff-guide.md; why:
docs/architecture.md, "The complaint workflow lives with the complaint" and the invariants
after it.

**Reporters hear back.** ``tell_reporter`` writes the email a change queues to the outbox
(``ReporterEmail``) in the change's own transaction, after its row lock;
``send_reporter_emails`` (hoa/jobs/reporter_mail.py) sends it. The opt-out link is the
complaint's id signed (``django.core.signing``, its own salt), good for that complaint
only. docs/operations.md, "Reporters' emails", has the rest.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import formataddr, parseaddr
from enum import StrEnum

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from hoa.complaints.exceptions import Rule, SlaChanged, StatusChanged, TransitionRefused
from hoa.complaints.extensions import assignment_guard
from hoa.models import Complaint, ComplaintEvent, Organization, ReporterEmail, Unit
from hoa.models.complaints import Moved

__all__ = [
    "MOVES",
    "NOTE_MAX_LENGTH",
    "RULES",
    "SLA_MAX_AHEAD",
    "Change",
    "ReporterKind",
    "add_note",
    "allows",
    "change_of_status",
    "change_sla",
    "change_status",
    "check_transition",
    "choices_from",
    "open_complaint",
    "opt_out_token",
    "opt_out_url",
    "record_assignment",
    "sender",
    "tell_reporter",
]

logger = logging.getLogger(__name__)

Status = Complaint.Status
NOTE_MAX_LENGTH = 2000
# How far ahead an SLA due time may be moved: a year, counted from the change.
SLA_MAX_AHEAD = timedelta(days=365)
EVERY_STATUS = frozenset(Status)
ReporterKind = ReporterEmail.Kind
OPT_OUT_SALT = "hoa.reporter-opt-out"


# -- the rules ----------------------------------------------------------------------------


class Change(StrEnum):
    """A change of a complaint, as the rule table names it."""

    OPEN = "open"  # open a complaint: it creates one, in ``open``
    STATUS = "status"  # a status change (``MOVES`` says to which)
    NOTE = "note"
    SLA = "sla"
    ASSIGN = "assign"  # a first vendor
    REASSIGN = "reassign"  # replace the active vendor
    CANCEL = "cancel"  # the told-in-vain cancellation of a dispatch


# Where each status may go by hand (``assigned`` is reached by assigning a vendor only).
MOVES: dict[str, tuple[str, ...]] = {
    Status.OPEN: (Status.RESOLVED, Status.CLOSED),
    Status.ASSIGNED: (Status.IN_PROGRESS, Status.RESOLVED, Status.CLOSED),
    Status.IN_PROGRESS: (Status.RESOLVED, Status.CLOSED),
    Status.RESOLVED: (Status.CLOSED, Status.IN_PROGRESS, Status.OPEN),
    Status.CLOSED: (Status.OPEN,),
}

# The statuses in which each change may run (``Change.OPEN`` runs on no complaint: it
# makes one).
RULES: dict[Change, frozenset[str]] = {
    Change.OPEN: frozenset(),
    Change.STATUS: frozenset(status for status, moves in MOVES.items() if moves),
    Change.NOTE: EVERY_STATUS,
    Change.SLA: frozenset(Complaint.OPEN_STATUSES),
    Change.ASSIGN: EVERY_STATUS - {Status.CLOSED},
    Change.REASSIGN: EVERY_STATUS - {Status.CLOSED},
    Change.CANCEL: EVERY_STATUS,
}


def allows(change: Change, status: str) -> bool:
    """Whether ``change`` may run on a complaint that is ``status``."""
    return status in RULES[change]


def choices_from(status: str, *, assigned: bool | None) -> list[tuple[str, str]]:
    """The statuses the page offers from ``status``, labelled as actions (``assigned``:
    ``extensions.assigned(complaint)``)."""
    offered = []
    for target in MOVES.get(status, ()):
        if target == Status.IN_PROGRESS and assigned is False:
            continue
        label = _("Reopen") if target == Status.OPEN else Status(target).label
        offered.append((target.value, str(label)))
    return offered


def check_transition(
    *, complaint: Complaint, seen: str, to: str, note: str, assigned: bool | None
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
    if to == Status.IN_PROGRESS and assigned is False:
        raise TransitionRefused(Rule.NEEDS_ASSIGNEE)
    if to not in MOVES[seen]:
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
    if to == Status.OPEN and assigned:
        return Status.ASSIGNED
    return to


# -- the operations -----------------------------------------------------------------------


@dataclass(frozen=True)
class StatusChange:
    complaint: Complaint
    seen: str
    to: str
    event: ComplaintEvent


def change_status(
    *, complaint: Complaint, seen: str, to: str, note: str, actor, assigned: bool | None = None
) -> StatusChange:
    """Move ``complaint`` from the status the actor saw to ``to``, with a note, once.

    ``assigned`` is what the caller read with its page (``extensions.assigned``): the rules
    are checked against it before anything is locked, except the one that needs someone
    assigned, which is read again under the row lock once the status is known to be the
    one seen (a vendor the page showed may have gone with a close the caller has not
    seen: that is a 409, not a rule broken). Closing ends the active vendor's assignment
    in the same transaction (the ``AssignmentGuard``'s ``on_close``).
    """
    note = note.strip()
    if seen not in Status.values or to not in Status.values:
        raise TransitionRefused(Rule.UNKNOWN_STATUS)
    try:
        check_transition(complaint=complaint, seen=seen, to=to, note=note, assigned=assigned)
    except TransitionRefused as refused:
        if refused.rule is not Rule.NEEDS_ASSIGNEE:
            raise  # decided under the lock, against who is assigned then
    guard = assignment_guard()
    with transaction.atomic():
        locked = Complaint.objects.locked(complaint.pk)
        current = locked.status if locked is not None else None
        if current != seen or not allows(Change.STATUS, current):
            raise StatusChanged(complaint=complaint, seen=seen, current=current, wanted=to)
        if guard is not None and to in (Status.IN_PROGRESS, Status.OPEN):
            assigned = guard.is_assigned(locked)  # what decides: read under the lock
        lands_on = check_transition(
            complaint=locked, seen=seen, to=to, note=note, assigned=assigned
        )
        closing = lands_on == Status.CLOSED
        moved = Complaint.objects.move_recorded(
            complaint.pk,
            from_status=seen,
            to_status=lands_on,
            event={"detail": note, "actor_id": actor.pk, "actor_label": actor.get_username()},
            closed_by_id=actor.pk if closing else None,
        )
        if closing and guard is not None and guard.on_close is not None:
            guard.on_close(locked, at=moved.at, actor=actor)
        if (kind := change_of_status(seen, lands_on)) is not None:
            tell_reporter(locked, kind, at=moved.at)
    event = _as_moved(complaint, moved, seen=seen, lands_on=lands_on, note=note, actor=actor)
    logger.info(
        "complaint status changed",
        extra={"complaint": complaint.pk, "from": seen, "to": lands_on, "actor": actor.pk},
    )
    return StatusChange(complaint=complaint, seen=seen, to=lands_on, event=event)


def _as_moved(
    complaint: Complaint, moved: Moved, *, seen: str, lands_on: str, note: str, actor
) -> ComplaintEvent:
    """Bring the caller's ``complaint`` up to the committed move, and return the event the
    move wrote, built from what was written (not read back)."""
    event = ComplaintEvent(
        pk=moved.event_id,
        complaint=complaint,
        kind=ComplaintEvent.Kind.STATUS_CHANGED,
        from_status=seen,
        to_status=lands_on,
        detail=note,
        actor=actor,
        actor_label=actor.get_username(),
        at=moved.at,
    )
    event._state.adding = False
    complaint.status = lands_on
    closing = lands_on == Status.CLOSED
    complaint.closed_at, complaint.closed_by = (moved.at, actor) if closing else (None, None)
    return event


@dataclass(frozen=True)
class Reporter:
    """Who reported a complaint, as staff took it down."""

    name: str
    email: str
    phone: str = ""


def open_complaint(
    *,
    organization: Organization,
    unit: Unit | None,
    title: str,
    description: str,
    priority: str,
    reporter: Reporter,
    actor,
) -> Complaint:
    """Open a complaint for ``reporter``, its SLA from the association's policy for
    ``priority``; the timeline starts with who opened it for whom. ``unit`` is one of the
    association's, or ``None`` for a common area (the database holds it too)."""
    with transaction.atomic():
        complaint = Complaint.objects.create(
            organization=organization,
            unit=unit,
            title=title,
            description=description,
            priority=priority,
            reporter_name=reporter.name,
            reporter_email=reporter.email,
            reporter_phone=reporter.phone,
        )
        ComplaintEvent.objects.create(
            complaint=complaint,
            kind=ComplaintEvent.Kind.OPENED,
            actor=actor,
            actor_label=actor.get_username(),
            at=complaint.opened_at,
        )
    logger.info(
        "complaint opened",
        extra={"complaint": complaint.pk, "organization": organization.pk, "actor": actor.pk},
    )
    return complaint


def add_note(*, complaint: Complaint, note: str, actor) -> ComplaintEvent:
    """Add a note to the complaint's timeline (any status, closed ones too)."""
    note = note.strip()
    if not note:
        raise TransitionRefused(Rule.EMPTY_NOTE)
    if len(note) > NOTE_MAX_LENGTH:
        raise TransitionRefused(Rule.NOTE_TOO_LONG, max=NOTE_MAX_LENGTH)
    with transaction.atomic():
        # In turn with every other change of the complaint, so that the note's time on the
        # timeline is after what committed before it.
        locked = Complaint.objects.locked(complaint.pk)
        if locked is None or not allows(Change.NOTE, locked.status):
            current = locked.status if locked is not None else None
            raise StatusChanged(
                complaint=complaint, seen=complaint.status, current=current, wanted=""
            )
        return ComplaintEvent.objects.create(
            complaint=complaint,
            kind=ComplaintEvent.Kind.NOTE,
            detail=note,
            actor=actor,
            actor_label=actor.get_username(),
        )


def change_sla(
    *, complaint: Complaint, due_at: datetime, reason: str, actor, seen_due: int | None = None
) -> ComplaintEvent:
    """Move the complaint's SLA due time to ``due_at``, recording the old one and why.

    ``seen_due``: the due time the page showed (seconds since the epoch); a due time
    changed since is ``SlaChanged`` (409), never overwritten unseen.

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
        locked = Complaint.objects.locked(complaint.pk)
        if not allows(Change.SLA, locked.status):
            raise TransitionRefused(Rule.NO_SLA_RUNNING, status=locked.status)
        if seen_due is not None and seen_due != int(locked.sla_due_at.timestamp()):
            raise SlaChanged(complaint=complaint, current=locked.sla_due_at)
        if due_at <= locked.opened_at:
            raise TransitionRefused(Rule.SLA_BEFORE_OPENING, opened=locked.opened_at)
        latest = timezone.now() + SLA_MAX_AHEAD
        if due_at > latest:
            raise TransitionRefused(Rule.SLA_TOO_FAR, latest=latest)
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
    # The move and its event in one statement: the event exists exactly when it moved.
    actor_id = actor.pk if actor is not None else None
    event = {"detail": note, "at": at, "actor_id": actor_id, "actor_label": actor_label}
    moved = Complaint.objects.move_recorded(
        complaint.pk, from_status=Status.OPEN, to_status=Status.ASSIGNED, event=event
    )
    if moved is not None:
        complaint.status = Status.ASSIGNED
    return moved is not None


# -- the reporter's emails ------------------------------------------------------------------


def change_of_status(seen: str, lands_on: str) -> str | None:
    """The kind of email a status change sends its reporter, or ``None`` (most don't)."""
    if lands_on == Status.RESOLVED:
        return ReporterKind.RESOLVED
    if lands_on == Status.CLOSED:
        return ReporterKind.CLOSED
    if seen in (Status.RESOLVED, Status.CLOSED):  # reopened, or work on it starts again
        return ReporterKind.REOPENED
    return None


def tell_reporter(
    complaint: Complaint,
    kind: str,
    *,
    at: datetime,
    vendor: str = "",
    replaced: str = "",
) -> int | None:
    """Queue the email that tells ``complaint``'s reporter of this change (``at``: its time;
    ``vendor``, ``replaced``: who was sent, and whom they take over from); return its id, or
    ``None`` when there is nobody to tell. In the change's transaction, after its row lock.

    ``complaint`` is the caller's copy: with no reporter email on it, nothing is written
    (no statement); otherwise the outbox row takes the address from the complaint's row,
    and none is written if the reporter opted out."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("tell_reporter runs inside the change's transaction")
    if not complaint.reporter_email:
        return None
    subject, body = render_email(complaint, kind, at=at, vendor=vendor, replaced=replaced)
    return ReporterEmail.objects.enqueue(complaint.pk, kind=kind, subject=subject, body=body)


def render_email(complaint: Complaint, kind: str, *, at: datetime, vendor="", replaced="") -> tuple:
    """The subject and the plain-text body, in the association's time zone."""
    organization = complaint.organization
    context = {
        "complaint": complaint,
        "organization": organization,
        "kind": kind,
        "at": at,
        "vendor": vendor,
        "replaced": replaced,
        "opt_out_url": opt_out_url(complaint),
    }
    with translation.override(settings.LANGUAGE_CODE), timezone.override(organization.zone):
        subject = render_to_string("hoa/reporters/email_subject.txt", context)
        body = render_to_string("hoa/reporters/email_body.txt", context)
    return " ".join(subject.split())[:300], body.strip() + "\n"


def sender(complaint: Complaint) -> str:
    """``From``: the association's name, at the deployment's sending address."""
    return formataddr((complaint.organization.name, parseaddr(settings.DEFAULT_FROM_EMAIL)[1]))


def opt_out_token(complaint: Complaint) -> str:
    """The complaint's opt-out token: signed, and the same whenever it is made (no
    timestamp), as the body's link is written when the change commits and the
    ``List-Unsubscribe`` header's when the email is sent: one email, one link."""
    return _signer().sign_object({"complaint": complaint.pk}, compress=True)


def _signer() -> signing.Signer:
    return signing.Signer(salt=OPT_OUT_SALT)


def opt_out_url(complaint: Complaint) -> str:
    path = reverse("hoa:reporter-opt-out", args=[opt_out_token(complaint)])
    return f"{settings.SITE_URL}{path}"


def complaint_of(token: str) -> Complaint | None:
    """The complaint an opt-out token names, or ``None`` when it is not one of ours."""
    try:
        value = _signer().unsign_object(token)
    except (signing.BadSignature, ValueError):  # not ours, or ours but not an object
        return None
    complaint_id = value.get("complaint") if isinstance(value, dict) else None
    if not isinstance(complaint_id, int):
        return None
    return Complaint.objects.select_related("organization").filter(pk=complaint_id).first()


def opt_out(complaint: Complaint) -> int:
    """Stop the emails about ``complaint``: record when, and skip those still queued;
    return how many queued ones were skipped. Saying it twice changes nothing."""
    with transaction.atomic():
        Complaint.objects.filter(pk=complaint.pk, reporter_opted_out_at__isnull=True).update(
            reporter_opted_out_at=timezone.now()
        )
        return ReporterEmail.objects.filter(
            complaint=complaint, state=ReporterEmail.State.PENDING
        ).update(state=ReporterEmail.State.SKIPPED)
