"""Vendor assignment: send one vendor to one complaint, exactly once, under a fenced lease.

``assign_vendor`` reads top to bottom: what the caller saw, the actor's permission and the
vendor's contract (before anything is locked), then one attempt's steps under the
complaint's lease (``hoa.fenced``, the runner every operation shares), in this order:

1. The claim, committed before the dispatch call (``locking.claim_fence``), then ``look``:
   the active assignment, to spare the vendor a call that cannot lead anywhere (nothing to
   write). A stale token is refused by the claim, before the vendor sees it.
2. ``call_outside``: the dispatch call, outside any transaction.
3. ``fence_row`` and ``commit``, in one transaction: the fence on the complaint row again
   (the same lease passes; a newer holder's claim made this one stale), then the state
   check (the complaint's status allows it, per ``hoa.complaints.workflow.RULES``: never a closed
   complaint; and the active assignment), then deactivate the previous one (only with
   ``reassign``) and create the new one with the lease's token; an ``open`` complaint
   becomes ``assigned`` (``hoa.complaints.record_assignment``) in the same transaction. A
   reassignment of the assignment the caller saw does the state check and both writes in
   one conditional statement (``VendorAssignment.objects.replace_if_active``), and so does
   an assignment whose look found none active (``insert_if_none_active``); when it
   matches nothing, the state is read and answered as above, nothing having been written.
4. ``take_back``: an attempt refused at commit after it told its vendor sends that vendor's
   dispatch a best-effort cancellation.

A closed complaint gets no vendor: refused before the lease when the caller's copy says
closed (``ComplaintClosed``, 400 / exit 1, or ``ClosedSinceViewed`` when the caller had seen
it open), by the look (``ClosedSinceViewed``, before any dispatch call) and by the state
check after the fence (``ClosedSinceViewed``; the vendor told in vain gets the
cancellation). Closing a complaint ends its vendor's assignment (``vendors.closing``).

Reassignment is a compare-and-swap on what the caller saw: ``replacing`` names the
assignment the caller looked at, and if another one is active at commit nothing is written
(``ChangedSinceViewed``, outcome ``conflict``). Two people replacing the same vendor at once
cannot both win, and nobody replaces a vendor they never saw.
"""

import logging
import re
from dataclasses import dataclass
from datetime import date
from enum import Enum, auto

from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from hoa.complaints.workflow import (
    RULES,
    Change,
    ReporterKind,
    allows,
    record_assignment,
    tell_reporter,
)
from hoa.fenced import FencedSteps, Look, Result
from hoa.integrations.webhooks import ExternalCallFailed, ExternalCallUnknown
from hoa.jobs.settling import SETTLE_VIA, Settled, settled_by
from hoa.models import Complaint, Organization, OutsideCall
from locking import FenceLock, Lease, LockHeld, LockUnavailable, Outcome
from locking.receiving import StaleAtReceiver
from vendors import answers
from vendors.dispatch import (
    CancelReason,
    cancel_dispatch,
    dispatch_assignment,
)
from vendors.exceptions import (
    AlreadyAssigned,
    AssignmentChanged,
    ChangedSinceViewed,
    ClosedSinceViewed,
    ComplaintClosed,
    ContractNotActive,
)
from vendors.insurance import check_insured
from vendors.models import Vendor, VendorAssignment
from vendors.operations import ASSIGNMENT
from vendors.resources import assignment_resource
from vendors.selectors import assignment_state, closes_of

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AssignmentResult(Result):
    """The runner's ``Result``, its ``row`` the active assignment of the vendor asked for."""

    replaced: VendorAssignment | None = None  # the assignment this call deactivated
    dispatched: bool = False  # the dispatch service was called (not skipped, not needed)

    @property
    def assignment(self) -> VendorAssignment:
        return self.row


class NotSaid(Enum):
    """The default of ``replacing``: the caller did not say which assignment it saw."""

    NOT_SAID = "not said"


def assign_vendor(
    *,
    complaint: Complaint,
    vendor: Vendor,
    actor,
    reassign: bool = False,
    replacing: VendorAssignment | NotSaid | None = NotSaid.NOT_SAID,
    seen_status: str | None = None,
    ip: str | None = None,
    via: str = "",
) -> AssignmentResult:
    """Make ``vendor`` the complaint's active vendor, once, under the complaint's fence.

    ``actor`` is the user asking (staff of the complaint's organization with
    ``vendors.assign_vendor``, or a superuser), or ``None`` for the deployment's operator
    at the shell (a management command run without ``--actor``); ``via`` says where the
    request came from (e.g. ``cli:deploy``) for the audit trail.

    With ``reassign``, ``replacing`` is required: the complaint's assignment the caller
    looked at when it decided, or ``None`` when it saw none. The vendor asked for replaces
    that assignment only; if another one is active at commit, nothing is written. Without
    ``reassign`` it is not consulted (any active vendor refuses the assignment).

    ``seen_status`` is the complaint's status the caller decided on (the staff page's form
    carries the one it showed); by default ``complaint.status``, the caller's copy. A
    closed complaint is refused: ``ComplaintClosed`` when the caller saw it closed,
    ``ClosedSinceViewed`` when it was closed since.

    Raises ``NotPermitted``, ``ComplaintClosed``, ``ContractNotActive`` and
    ``VendorNotInsured`` before anything is locked; ``Busy``, ``LockServiceDown``,
    ``CallFailed``, ``Superseded``, ``LeaseRanOut`` (the kinds every operation shares,
    ``hoa.answers.refusals``), ``AlreadyAssigned``, ``ChangedSinceViewed``,
    ``ClosedSinceViewed`` and ``AssignmentChanged`` (``vendors.exceptions``) with nothing
    written: all ``Refusal``.
    """
    replacing = _what_the_caller_saw(complaint, reassign, replacing)
    organization = complaint.organization
    resource = assignment_resource(complaint.pk)
    call = ASSIGNMENT.begin(actor, organization=organization, resource=resource, via=via, ip=ip)
    change = Change.REASSIGN if reassign else Change.ASSIGN
    seen = seen_status if seen_status is not None else complaint.status
    if not allows(change, complaint.status):  # the caller's copy, read before the lease
        if seen == complaint.status:
            raise ComplaintClosed(complaint=complaint)
        raise ClosedSinceViewed(complaint=complaint, seen=seen, now_assigned=None)
    _check_contract(vendor, organization, timezone.localdate())
    steps = Assignment(
        complaint, vendor, reassign, replacing, actor=actor, by=call.label, seen_status=seen
    )
    return call.run(steps)


class Decision(Enum):
    """What the complaint's active assignment decides for an attempt."""

    ALREADY_DONE = auto()  # the vendor asked for is the active one
    REFUSE = auto()  # another vendor is active and reassign was not asked
    CHANGED = auto()  # reassign, but the active assignment is not the one the caller saw
    ASSIGN = auto()  # write a new active assignment


@dataclass(frozen=True)
class AssignmentLook(Look):
    current: VendorAssignment | None  # the active assignment before the call
    after_id: int | None  # the complaint's latest assignment, which the dispatch key names
    closed_id: int | None  # the complaint's latest close (its event), which the key names too


@dataclass(frozen=True)
class Assignment(FencedSteps):
    """One attempt to send ``vendor`` to ``complaint``, as the runner's steps."""

    complaint: Complaint
    vendor: Vendor
    reassign: bool
    replacing: VendorAssignment | None  # what the caller saw (consulted with reassign)
    actor: object  # the user, or None for the operator at the shell
    by: str  # who asked, as the audit records it
    seen_status: str = ""  # the complaint's status the caller decided on

    endpoint = "dispatch"

    @property
    def subject(self) -> dict:
        return {"complaint": self.complaint}

    @property
    def change(self) -> Change:
        """The change of the complaint this is, as its rule table names it."""
        return Change.REASSIGN if self.reassign else Change.ASSIGN

    def decide(self, current: VendorAssignment | None) -> Decision:
        if current is not None and current.vendor_id == self.vendor.pk:
            return Decision.ALREADY_DONE
        if not self.reassign:
            return Decision.REFUSE if current is not None else Decision.ASSIGN
        if _pk(current) != _pk(self.replacing):
            return Decision.CHANGED
        return Decision.ASSIGN

    def look(self, lease: Lease) -> AssignmentLook:
        status, current, after_id, closed_id = _look_before_calling(
            self.complaint, seen=self.replacing
        )
        if not allows(self.change, status):  # closed since the caller looked: nobody is called
            raise ClosedSinceViewed(
                complaint=self.complaint, seen=self.seen_status, now_assigned=current
            )
        needs_call = self.decide(current) is Decision.ASSIGN
        return AssignmentLook(
            current=current, after_id=after_id, closed_id=closed_id, needs_call=needs_call
        )

    def fence_row(self, found: AssignmentLook) -> QuerySet:
        return Complaint.objects.filter(pk=self.complaint.pk)

    def call_outside(self, lease: Lease, found: AssignmentLook) -> Vendor | None:
        call = dispatch_assignment(
            complaint=self.complaint,
            vendor=self.vendor,
            replacing=found.current,
            after_id=found.after_id,
            closed_id=found.closed_id,
            token=lease,
        )
        return None if call.skipped else self.vendor

    def commit(
        self, lease: Lease, found: AssignmentLook, receipt: Vendor | None
    ) -> AssignmentResult:
        # The fence UPDATE holds the complaint's row lock until commit, so every fenced
        # writer of this complaint reads the assignment state in turn, and the complaint's
        # status read with it cannot change before we commit.
        if (replaced := self._replace_seen(lease, found, receipt)) is not None:
            return replaced
        if (first := self._assign_first(lease, found, receipt)) is not None:
            return first
        status, current = assignment_state(self.complaint)
        if not allows(self.change, status):
            raise ClosedSinceViewed(
                complaint=self.complaint, seen=self.seen_status, now_assigned=current
            )
        match self.decide(current):
            case Decision.ALREADY_DONE:
                return AssignmentResult(
                    Outcome.ALREADY_DONE, lease.token, current, answers.result_message
                )
            case Decision.REFUSE:
                raise AlreadyAssigned(complaint=self.complaint, winner=current)
            case Decision.CHANGED:
                raise ChangedSinceViewed(
                    complaint=self.complaint, expected=self.replacing, current=current
                )
        if not found.needs_call:
            # An older holder committed between our look and our fence; we did not call
            # the vendor, so we must not record them as sent.
            raise AssignmentChanged(complaint=self.complaint, current=current)
        assignment = self._replace(current, status, lease.token)
        return AssignmentResult(
            Outcome.COMMITTED,
            lease.token,
            assignment,
            answers.result_message,
            current,
            dispatched=receipt is not None,
        )

    def _replace_seen(
        self, lease: Lease, found: AssignmentLook, receipt: Vendor | None
    ) -> AssignmentResult | None:
        """A reassignment whose look found the assignment the caller saw: deactivate it and
        insert the new one in one conditional statement (the state check and both writes).
        ``None`` when it matched nothing (another vendor is active, or the one asked for,
        or none): ``commit`` then reads the state and answers as it would have, nothing
        having been written."""
        seen = self.replacing
        if not (self.reassign and seen is not None and found.needs_call):
            return None
        assignment = self._new_assignment(lease.token)
        status = VendorAssignment.objects.replace_if_active(
            seen, assignment, statuses=RULES[self.change]
        )
        if status is None:
            return None
        self._record(assignment, status, replaced=seen)
        return AssignmentResult(
            Outcome.COMMITTED,
            lease.token,
            assignment,
            answers.result_message,
            seen,
            dispatched=receipt is not None,
        )

    def _assign_first(
        self, lease: Lease, found: AssignmentLook, receipt: Vendor | None
    ) -> AssignmentResult | None:
        """An assignment whose look found none active: insert it if there still is none, the
        state check and the write in one conditional statement. ``None`` when one became
        active meanwhile: ``commit`` then reads the state and answers, nothing written."""
        if not (found.current is None and found.needs_call):
            return None
        assignment = self._new_assignment(lease.token)
        status = VendorAssignment.objects.insert_if_none_active(
            assignment, statuses=RULES[self.change]
        )
        if status is None:
            return None
        self._record(assignment, status)
        return AssignmentResult(
            Outcome.COMMITTED,
            lease.token,
            assignment,
            answers.result_message,
            dispatched=receipt is not None,
        )

    def _replace(
        self, current: VendorAssignment | None, status: str, token: int
    ) -> VendorAssignment:
        assignment = self._new_assignment(token)
        if current is None:
            VendorAssignment.objects.insert_if_none_active(assignment, statuses=[status])
        else:
            VendorAssignment.objects.replace_if_active(current, assignment, statuses=[status])
        self._record(assignment, status, replaced=current)
        return assignment

    def _new_assignment(self, token: int) -> VendorAssignment:
        """The assignment to insert; the statement that inserts it stamps ``assigned_at``."""
        return VendorAssignment(
            complaint=self.complaint,
            vendor=self.vendor,
            fence_token=token,
            assigned_by=self.actor,
            actor_label=self.by,
        )

    def _record(self, assignment: VendorAssignment, status: str | None, *, replaced=None) -> None:
        # Same transaction, after the fence: an open complaint becomes assigned, and the
        # reporter's email about it is queued.
        record_assignment(
            complaint=self.complaint,
            actor=self.actor,
            actor_label=self.by,
            note=answers.assigned_note(assignment),
            at=assignment.assigned_at,
            status=status,
        )
        tell_reporter(
            self.complaint,
            ReporterKind.VENDOR_REPLACED if replaced is not None else ReporterKind.VENDOR_ASSIGNED,
            at=assignment.assigned_at,
            vendor=self.vendor.name,
            replaced=replaced.vendor.name if replaced is not None else "",
        )

    def take_back(self, lease: Lease, found: AssignmentLook, refusal: Exception) -> str:
        try:
            call = cancel_dispatch(
                complaint=self.complaint,
                vendor=self.vendor,
                replacing=found.current,
                after_id=found.after_id,
                closed_id=found.closed_id,
                now_assigned=getattr(refusal, "now_assigned", None),  # overtaken: unknown
                reason=CancelReason.REFUSED,
                token=lease,
            )
        except ExternalCallFailed as exc:
            logger.warning(
                "dispatch cancellation failed",
                extra={"resource": lease.resource, "token": lease.token, "reason": exc.reason},
            )
            return f"cancellation failed: {exc.reason}"
        except StaleAtReceiver as exc:  # the dispatch service has a newer call for the key
            return f"cancellation refused as stale ({exc})"
        if call.skipped:
            return "cancellation skipped: no dispatch URL configured"
        return f"cancellation sent (HTTP {call.status})"


def _what_the_caller_saw(complaint, reassign: bool, replacing) -> VendorAssignment | None:
    if replacing is NotSaid.NOT_SAID:
        if reassign:
            raise TypeError(
                "assign_vendor(reassign=True) needs replacing=: the assignment the caller "
                "saw (or None)"
            )
        return None
    if replacing is not None and replacing.complaint_id != complaint.pk:
        raise ValueError(f"assignment {replacing.pk} is not one of complaint {complaint.pk}'s")
    return replacing


def _pk(assignment: VendorAssignment | None) -> int | None:
    return assignment.pk if assignment is not None else None


def _look_before_calling(
    complaint: Complaint, *, seen: VendorAssignment | None = None
) -> tuple[str, VendorAssignment | None, int | None, int | None]:
    """Return the complaint's status, its active assignment, the id of its latest one
    (active or ended) and the id of its latest close (the event), read under the claim (no
    fenced writer can change them before this attempt commits or is refused; a close,
    which takes no lease, is caught again by the state check after the fence).

    Only spares the vendor a call that cannot lead anywhere: the conditional UPDATE in
    ``advance_fence`` and the state check after it are what decide.
    """
    # One round trip for the status and the assignments' ids; the active assignment itself
    # (with its vendor, for the dispatch payload) only when there is one.
    assignments = VendorAssignment.objects.filter(complaint=OuterRef("pk"))
    active_id = assignments.filter(active=True).values("pk")
    latest_id = assignments.order_by("-pk").values("pk")
    status, current_id, latest, closed_id = (
        Complaint.objects.filter(pk=complaint.pk)
        .values_list(
            "status",
            Subquery(active_id[:1]),
            Subquery(latest_id[:1]),
            Subquery(closes_of(OuterRef("pk"))[:1]),
        )
        .first()
    ) or (complaint.status, None, None, None)
    if current_id is None:
        return status, None, latest, closed_id
    if seen is not None and seen.pk == current_id:
        # The caller's, already read: still the active one.
        return status, seen, current_id, closed_id
    current = VendorAssignment.objects.select_related("vendor").filter(pk=current_id).first()
    return status, current, current_id, closed_id


def _check_contract(vendor: Vendor, organization: Organization, day: date) -> None:
    contracts = vendor.contracts_with(organization)
    if any(contract.covers(day) for contract in contracts):
        check_insured(vendor, organization, day, contracts)  # and insured (VendorNotInsured)
        return
    upcoming = [c for c in contracts if c.starts_on > day]
    nearest = (
        min(upcoming, key=lambda c: c.starts_on)
        if upcoming
        else max(contracts, key=lambda c: c.ends_on, default=None)
    )
    raise ContractNotActive(vendor=vendor, organization=organization, day=day, contract=nearest)


_DISPATCH_KEY = re.compile(
    r"vendor-assignment:(?P<complaint>[0-9]{1,18}):(?P<vendor>[0-9]{1,18}):replacing:"
    r"(?P<after>[0-9]{1,18}|none)(?::closed:(?P<closed>[0-9]{1,18}))?"
)


def settle_unknown(call: OutsideCall) -> Settled:
    """Settle a dispatch whose outcome was unknown: make the same assignment again by the
    same key (the dispatch service answers the dispatch it made, or makes it now) and
    record it; when it can no longer be recorded under that key (another vendor has the
    complaint, it was closed, its assignments moved on, the contract ended), take the
    dispatch back with the cancellation."""
    key = _DISPATCH_KEY.fullmatch(call.idempotency_key)
    complaint = (
        Complaint.objects.select_related("organization", "unit")
        .filter(pk=key["complaint"], organization=call.organization)
        .first()
    )
    vendor = Vendor.objects.filter(pk=key["vendor"]).first()
    if complaint is None or vendor is None:
        return None  # nothing to send a cancellation about: an operator looks
    after_id = None if key["after"] == "none" else int(key["after"])
    closed_id = int(key["closed"]) if key["closed"] else None
    _status, current, latest, closed = _look_before_calling(complaint)
    if (latest, closed) != (after_id, closed_id) and not (
        current is not None and current.vendor_id == vendor.pk
    ):  # the same change would now carry another key: it can only be taken back
        return _take_back_unknown(complaint, vendor, after_id, closed_id, "moved on")
    replacing = current if current is not None and current.pk == after_id else None
    return settled_by(
        lambda: assign_vendor(
            complaint=complaint,
            vendor=vendor,
            actor=None,
            via=SETTLE_VIA,
            reassign=replacing is not None,
            replacing=replacing,
        ),
        refused=lambda refusal: _take_back_unknown(complaint, vendor, after_id, closed_id, refusal),
    )


def _take_back_unknown(complaint, vendor, after_id, closed_id, why) -> Settled:
    """The cancellation of a dispatch that may have been made and cannot be recorded, sent
    under the complaint's lease (no assignment of it runs meanwhile)."""
    resource = assignment_resource(complaint.pk)
    ttl = ASSIGNMENT.lease_ttl
    try:
        with FenceLock().acquire(resource, ttl=ttl, holder=SETTLE_VIA) as lease:
            call = cancel_dispatch(
                complaint=complaint,
                vendor=vendor,
                replacing=None,
                after_id=after_id,
                closed_id=closed_id,
                now_assigned=assignment_state(complaint)[1],
                reason=CancelReason.REFUSED,
                token=lease,
            )
    except (LockHeld, LockUnavailable, ExternalCallFailed, ExternalCallUnknown, StaleAtReceiver):
        return None  # the next pass tries again
    if call.skipped:
        return OutsideCall.Settlement.NOT_NEEDED, "no dispatch URL configured"
    return OutsideCall.Settlement.TAKEN_BACK, f"{why}; cancellation sent (HTTP {call.status})"
