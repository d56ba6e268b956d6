"""The complaint's rule table: which change may run in which status, in one place.

The pages (which forms and cards a complaint shows), the admin's actions, the commands and
the services (the check each runs under the complaint's row lock) all read ``RULES``;
docs/staff-guide.md ("Statuses") is the same table for people, and a test keeps the two in
step.

=================================  ====  ========  ===========  ========  ======
change                             open  assigned  in progress  resolved  closed
=================================  ====  ========  ===========  ========  ======
open a complaint (creates one)     -     -         -            -         -
status change (see ``MOVES``)      yes   yes       yes          yes       reopen
note                               yes   yes       yes          yes       yes
SLA change                         yes   yes       yes          no        no
assign a first vendor              yes   yes       yes          yes       no
reassign (replace the vendor)      yes   yes       yes          yes       no
told-in-vain cancellation          yes   yes       yes          yes       yes
=================================  ====  ========  ===========  ========  ======

How each change holds the rule: it takes the complaint's row lock first (``SELECT … FOR
NO KEY UPDATE``; a fenced assignment's fence ``UPDATE`` takes the same lock), reads the
status under it and checks it against this table, then writes, all in one transaction. Two
changes of one complaint therefore run one after the other, each against what the other
committed, and the timeline's events are stamped after the lock (the database's
``statement_timestamp()`` of a statement sent once the lock is held), so their order on the
timeline is the order they committed in.

- Assigning needs no vendor active unless it replaces one (the vendor's own state check);
  an ``open`` complaint becomes ``assigned`` in the assignment's transaction.
- Closing ends the active vendor's assignment in the close's transaction, and the vendor's
  dispatch is told after the commit (the same best-effort cancellation as a told-in-vain
  one). Closed is final: a closed complaint gets no vendor until it is reopened.
- The told-in-vain cancellation writes nothing to the complaint: it takes back a dispatch
  call whose assignment the state check refused (the complaint was closed meanwhile, or
  another vendor was assigned), whatever the status is now.
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
