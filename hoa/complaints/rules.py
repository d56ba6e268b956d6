"""The complaint's rules in one place: which change may run in which status (``RULES``), and
where a status change may go (``MOVES``).

The pages, the admin's actions, the commands and the services read them; each change checks
them under the complaint's row lock, in the transaction that writes. docs/staff-guide.md,
"Statuses", has the same tables for people (a test keeps them in step);
docs/architecture.md, "Invariants between operations on one complaint", says why it holds.
"""

from enum import StrEnum

from hoa.models import Complaint

__all__ = ["MOVES", "RULES", "Change", "allows"]

Status = Complaint.Status
EVERY_STATUS = frozenset(Status)


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
