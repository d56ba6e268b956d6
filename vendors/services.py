"""Vendor assignment: send one vendor to one complaint, exactly once, under a fenced lease.

The order of one call (docs/design.md explains every step):

1. Validate before anything is locked: the vendor's contract with the complaint's
   organization covers today, and the actor is staff of that organization.
2. ``run_fenced`` grants a lease on ``vendor-assignment:complaint:<id>`` with a token.
3. Look at the complaint: whether the vendor must be called at all.
4. The dispatch call, outside any transaction.
5. One transaction: the fence on the complaint row first, then the state check on the
   active assignment, then deactivate the previous one (only with ``reassign``) and create
   the new one with the lease's token; an ``open`` complaint becomes ``assigned``
   (``hoa.complaints.record_assignment``) in the same transaction.

Reassignment is a compare-and-swap on what the caller saw: ``replacing`` names the
assignment the caller looked at, and if another one is active at commit nothing is written
(``ChangedSinceViewed``, outcome ``conflict``). Two people replacing the same vendor at once
cannot both win, and nobody replaces a vendor they never saw. An attempt refused at commit
after it told its vendor sends that vendor's dispatch a best-effort cancellation.
"""

import logging
from dataclasses import dataclass
from datetime import date
from enum import Enum, auto

from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from hoa.complaints import record_assignment
from hoa.integrations.webhooks import ExternalCallFailed
from hoa.models import Complaint, Organization
from locking import Lease, Outcome, StaleFencingToken, advance_fence, span
from vendors import answers
from vendors.dispatch import cancel_dispatch, dispatch_assignment
from vendors.exceptions import (
    AlreadyAssigned,
    AssignmentChanged,
    ChangedSinceViewed,
    ContractNotActive,
    DispatchFailed,
    RefusedAtCommit,
)
from vendors.models import Vendor, VendorAssignment, VendorContract
from vendors.resources import ASSIGNMENT, assignment_resource
from vendors.selectors import active_assignment

logger = logging.getLogger(__name__)

# --- Result ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AssignmentResult:
    """What ``assign_vendor`` did. ``outcome`` is the FenceEvent outcome it recorded."""

    assignment: VendorAssignment  # the active assignment of the vendor asked for
    outcome: Outcome  # COMMITTED or ALREADY_DONE
    token: int
    replaced: VendorAssignment | None = None  # the assignment this call deactivated
    dispatched: bool = False  # the dispatch service was called (not skipped, not needed)

    @property
    def already_done(self) -> bool:
        return self.outcome == Outcome.ALREADY_DONE

    @property
    def message(self) -> str:
        return answers.result_message(
            self.assignment, already_done=self.already_done, replaced=self.replaced
        )


# --- The operation -----------------------------------------------------------------------


class _Next(Enum):
    """What the state of the complaint asks of an attempt."""

    ALREADY_DONE = auto()  # the vendor asked for is the active one
    REFUSE = auto()  # another vendor is active and reassign was not asked
    CHANGED = auto()  # reassign, but the active assignment is not the one the caller saw
    ASSIGN = auto()  # write a new active assignment


class Unstated(Enum):
    """The default of ``replacing``: the caller did not say what it saw."""

    UNSTATED = "unstated"


def _next_step(
    current: VendorAssignment | None,
    vendor: Vendor,
    reassign: bool,
    replacing: VendorAssignment | None,
) -> _Next:
    if current is not None and current.vendor_id == vendor.pk:
        return _Next.ALREADY_DONE
    if not reassign:
        return _Next.REFUSE if current is not None else _Next.ASSIGN
    if _pk(current) != _pk(replacing):
        return _Next.CHANGED
    return _Next.ASSIGN


def _pk(assignment: VendorAssignment | None) -> int | None:
    return assignment.pk if assignment is not None else None


def assign_vendor(
    *,
    complaint: Complaint,
    vendor: Vendor,
    actor,
    reassign: bool = False,
    replacing: VendorAssignment | Unstated | None = Unstated.UNSTATED,
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

    Raises ``NotAllowed`` and ``ContractNotActive`` before anything is locked;
    ``AssignmentBusy`` (another attempt holds the lease), ``LockServiceUnavailable``
    (Redis down), ``DispatchFailed``, ``AssignmentSuperseded`` (a newer attempt took over),
    ``AlreadyAssigned``, ``ChangedSinceViewed`` and ``AssignmentChanged`` with nothing
    written: all ``VendorsError`` (``vendors.exceptions``).
    """
    if replacing is Unstated.UNSTATED:
        if reassign:
            raise TypeError(
                "assign_vendor(reassign=True) needs replacing=: the assignment the caller "
                "saw (or None)"
            )
        replacing = None
    elif replacing is not None and replacing.complaint_id != complaint.pk:
        raise ValueError(f"assignment {replacing.pk} is not one of complaint {complaint.pk}'s")
    organization = complaint.organization
    resource = assignment_resource(complaint.pk)
    attempt = ASSIGNMENT.begin(actor, via=via, organization=organization, resource=resource, ip=ip)
    _check_contract(vendor, organization, timezone.localdate())

    def work(lease: Lease) -> AssignmentResult:
        looked = _look_before_calling(complaint, lease.token, seen=replacing)
        needs_call = _next_step(looked, vendor, reassign, replacing) is _Next.ASSIGN
        dispatched = False
        if needs_call:
            # Not worth telling a vendor if the lease is already gone: LeaseLost.
            lease.check()
            try:
                with span("external-call", lease=lease, attributes={"endpoint": "dispatch"}):
                    call = dispatch_assignment(
                        complaint=complaint, vendor=vendor, replacing=looked, token=lease.token
                    )
            except ExternalCallFailed as exc:
                raise DispatchFailed(call=exc, complaint=complaint, vendor=vendor) from exc
            dispatched = not call.skipped
        try:
            with transaction.atomic():
                # Fence first: a holder whose lease was taken over learns it here, even
                # when the work it came for has been done meanwhile.
                advance_fence(Complaint.objects.filter(pk=complaint.pk), lease)
                # The fence UPDATE holds the complaint's row lock until commit, so every
                # fenced writer of this complaint reads the assignment state in turn, and
                # the complaint's status read with it cannot change before we commit.
                current = active_assignment(complaint, with_complaint_status=True)
                step = _next_step(current, vendor, reassign, replacing)
                if step is _Next.ALREADY_DONE:
                    lease.record_committed(Outcome.ALREADY_DONE)
                    return AssignmentResult(
                        assignment=current, outcome=Outcome.ALREADY_DONE, token=lease.token
                    )
                if step is _Next.REFUSE:
                    raise AlreadyAssigned(complaint=complaint, winner=current)
                if step is _Next.CHANGED:
                    raise ChangedSinceViewed(
                        complaint=complaint, expected=replacing, current=current
                    )
                if not needs_call:
                    # An older holder committed between our look and our fence; we did
                    # not call the vendor, so we must not record them as sent.
                    raise AssignmentChanged(complaint=complaint, current=current)
                now = timezone.now()
                if current is not None:
                    # Before the insert: the one-active-per-complaint index is not
                    # deferrable.
                    VendorAssignment.objects.filter(pk=current.pk).update(
                        active=False, deactivated_at=now
                    )
                    current.active, current.deactivated_at = False, now
                assignment = VendorAssignment.objects.create(
                    complaint=complaint,
                    vendor=vendor,
                    fence_token=lease.token,
                    assigned_at=now,
                    assigned_by=actor,
                    actor_label=attempt.label,
                )
                # Same transaction, after the fence: an open complaint becomes assigned.
                record_assignment(
                    complaint=complaint,
                    actor=actor,
                    actor_label=attempt.label,
                    note=answers.assigned_note(assignment),
                    at=now,
                    status=current.complaint_status if current is not None else None,
                )
                lease.record_committed()  # the audit row commits with the assignment
        except RefusedAtCommit as refusal:
            if dispatched:
                # Rolled back, but the vendor has been told: say so, and take it back.
                refusal.told_in_vain = vendor
                refusal.cancellation = _cancel_dispatch(
                    complaint=complaint,
                    vendor=vendor,
                    replacing=looked,
                    now_assigned=refusal.now_assigned,
                    token=lease.token,
                )
            raise
        logger.info(
            "vendor assigned",
            extra={
                "resource": resource,
                "token": lease.token,
                "outcome": Outcome.COMMITTED,
                "complaint": complaint.pk,
                "vendor": vendor.pk,
                "replaced": current.pk if current else None,
            },
        )
        return AssignmentResult(
            assignment=assignment,
            outcome=Outcome.COMMITTED,
            token=lease.token,
            replaced=current,
            dispatched=dispatched,
        )

    # Refusals are recorded with the outcome their exception declares; the detail (the
    # exception's text) names the vendor that holds the complaint, and the vendor told in vain.
    return attempt.run(work, complaint=complaint)


def _cancel_dispatch(
    *,
    complaint: Complaint,
    vendor: Vendor,
    replacing: VendorAssignment | None,
    now_assigned: VendorAssignment | None,
    token: int,
) -> str:
    """Send the best-effort cancellation; return what happened, for the audit. Never raises:
    the caller is owed its refusal, not an error about the cleanup."""
    try:
        call = cancel_dispatch(
            complaint=complaint,
            vendor=vendor,
            replacing=replacing,
            now_assigned=now_assigned,
            token=token,
        )
    except ExternalCallFailed as exc:
        logger.warning(
            "dispatch cancellation failed",
            extra={
                "resource": assignment_resource(complaint.pk),
                "token": token,
                "vendor": vendor.pk,
                "reason": exc.reason,
            },
        )
        return f"cancellation failed: {exc.reason}"
    if call.skipped:
        return "cancellation skipped: no dispatch URL configured"
    return f"cancellation sent (HTTP {call.status})"


def _look_before_calling(
    complaint: Complaint, token: int, *, seen: VendorAssignment | None = None
) -> VendorAssignment | None:
    """Return the active assignment, or raise ``StaleFencingToken`` if ``token`` cannot win.

    Only spares the vendor a call that cannot lead anywhere: the conditional UPDATE in
    ``advance_fence`` is what decides. A token at or below the recorded one means a newer
    holder took over, or the Redis counter is behind; raising here lets ``run_fenced`` tell
    the two apart and start a new epoch before the vendor ever sees a doomed token.
    """
    # One round trip for the recorded token and the active assignment's id; the assignment
    # itself (with its vendor, for the dispatch payload) only when there is one.
    active_id = VendorAssignment.objects.filter(complaint=OuterRef("pk"), active=True).values("pk")
    recorded, current_id = (
        Complaint.objects.filter(pk=complaint.pk)
        .values_list("last_fence_token", Subquery(active_id[:1]))
        .first()
    ) or (None, None)
    if recorded is not None and token <= recorded:
        raise StaleFencingToken(token, recorded)
    if current_id is None:
        return None
    if seen is not None and seen.pk == current_id:
        return seen  # the caller's, already read: the one it saw is still the active one
    return VendorAssignment.objects.select_related("vendor").filter(pk=current_id).first()


def _check_contract(vendor: Vendor, organization: Organization, day: date) -> None:
    contracts = list(VendorContract.objects.filter(vendor=vendor, organization=organization))
    if any(contract.covers(day) for contract in contracts):
        return
    upcoming = [c for c in contracts if c.starts_on > day]
    nearest = (
        min(upcoming, key=lambda c: c.starts_on)
        if upcoming
        else max(contracts, key=lambda c: c.ends_on, default=None)
    )
    raise ContractNotActive(vendor=vendor, organization=organization, day=day, contract=nearest)
