"""What the complaint workflow refuses on purpose; nothing was written.

Each refusal carries facts (the rule a change breaks, the status seen and found);
``hoa.complaints.answers`` renders its sentence when a page asks.
"""

from enum import StrEnum

from django.utils.translation import gettext_lazy

from hoa.answers.refusals import Refusal
from hoa.answers.table import Answer
from hoa.models import Complaint


class Rule(StrEnum):
    """The rule a refused change breaks (``hoa.complaints.answers.RULES`` says it)."""

    UNCHANGED = "unchanged"
    ASSIGNED_BY_HAND = "assigned-by-hand"
    CLOSED_IS_FINAL = "closed-is-final"
    NEEDS_ASSIGNEE = "needs-assignee"
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
    SLA_TOO_FAR = "sla-too-far"


class ComplaintsError(Refusal):
    """Base of what the workflow refuses on purpose; nothing was written."""


class TransitionRefused(ComplaintsError):
    """The change breaks ``rule``; ``facts`` fill its sentence. 400."""

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


class SlaChanged(ComplaintsError):
    """Someone moved the SLA due time since the page was shown: it is ``current`` now. 409."""

    answer = Answer.RETRY
    title = gettext_lazy("The SLA changed meanwhile")

    def __init__(self, *, complaint: Complaint, current):
        super().__init__(complaint=complaint, current=current)
