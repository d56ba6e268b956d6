"""Vendor assignment: send one vendor to one complaint, exactly once, under a fenced lease.

The order of one call (docs/design.md explains every step):

1. Validate before anything is locked: the vendor's contract with the complaint's
   organization covers today, and the actor is staff of that organization.
2. ``run_fenced`` grants a lease on ``vendor-assignment:complaint:<id>`` with a token.
3. Look at the complaint: whether the vendor must be called at all.
4. The dispatch call, outside any transaction.
5. One transaction: the fence on the complaint row first, then the state check on the
   active assignment, then deactivate the previous one (only with ``reassign``) and create
   the new one with the lease's token.

Reassignment is a compare-and-swap on what the caller saw: ``replacing`` names the
assignment the caller looked at, and if another one is active at commit nothing is written
(``ChangedSinceViewed``, outcome ``conflict``). Two people replacing the same vendor at once
cannot both win, and nobody replaces a vendor they never saw. An attempt refused at commit
after it told its vendor sends that vendor's dispatch a best-effort cancellation.
"""

import logging
from dataclasses import dataclass
from datetime import date, timedelta
from enum import Enum, auto

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from hoa.integrations.webhooks import ExternalCallFailed
from hoa.models import Complaint, Organization
from hoa.scopes import scope_for_organization
from locking import (
    Attempt,
    Lease,
    Outcome,
    StaleFencingToken,
    advance_fence,
    record_fence_event,
    run_fenced,
)
from vendors.dispatch import cancel_dispatch, dispatch_assignment
from vendors.models import Vendor, VendorAssignment, VendorContract
from vendors.resources import OPERATION, assignment_resource
from vendors.selectors import active_assignment

logger = logging.getLogger(__name__)

ASSIGN_PERMISSION = "vendors.assign_vendor"


# --- Exceptions --------------------------------------------------------------------------


class VendorsError(Exception):
    """Base class of everything the vendors app raises on purpose.

    Each exception that answers an attempt declares its ``outcome`` (``run_fenced`` records
    it); ``ContractNotActive`` has none: it is bad input, refused before any attempt.
    """


class NotAllowed(VendorsError):
    """The actor may not assign vendors for the complaint's organization; nothing locked."""

    outcome = Outcome.DENIED

    def __init__(self, *, actor, organization: Organization):
        self.actor = actor
        self.organization = organization
        super().__init__(f"{actor} may not assign vendors for {organization}")


class ContractNotActive(VendorsError):
    """No contract between the vendor and the organization covers the day; nothing locked.

    ``contract`` is the nearest one (the next to start, else the last to end), or ``None``
    when the vendor never had a contract with the organization.
    """

    def __init__(
        self,
        *,
        vendor: Vendor,
        organization: Organization,
        day: date,
        contract: VendorContract | None,
    ):
        self.vendor = vendor
        self.organization = organization
        self.day = day
        self.contract = contract
        super().__init__(f"{vendor} has no contract with {organization} covering {day}")

    @property
    def starts_later(self) -> bool:
        return self.contract is not None and self.contract.starts_on > self.day


class DispatchFailed(VendorsError):
    """The dispatch service refused, failed or timed out; nothing was written."""

    outcome = Outcome.FAILED

    def __init__(self, *, complaint: Complaint, vendor: Vendor, reason: str, status=None):
        self.complaint = complaint
        self.vendor = vendor
        self.reason = reason
        self.status = status
        super().__init__(f"dispatch of {vendor} to complaint {complaint.pk} failed: {reason}")


class RefusedAtCommit(VendorsError):
    """A refusal decided by the state check inside the transaction; nothing was written.

    The attempt may have told its vendor before (the dispatch call precedes the
    transaction): then ``told_in_vain`` is that vendor and ``cancellation`` what the
    best-effort cancellation got, and the text (the audit detail) says both.
    """

    told_in_vain: Vendor | None = None
    cancellation: str = ""

    def __init__(self, message: str, *, now_assigned: VendorAssignment | None):
        self.now_assigned = now_assigned  # the assignment active at the refusal
        super().__init__(message)

    def __str__(self) -> str:
        text = super().__str__()
        if self.told_in_vain is None:
            return text
        return f"{text}; {self.told_in_vain} was told in vain; {self.cancellation}"


class AlreadyAssigned(RefusedAtCommit):
    """Another vendor is actively assigned and ``reassign`` was not asked; nothing written.

    Recorded as already done: another attempt settled the complaint.
    """

    outcome = Outcome.ALREADY_DONE

    def __init__(self, *, complaint: Complaint, winner: VendorAssignment):
        self.complaint = complaint
        self.winner = winner
        super().__init__(
            f"complaint {complaint.pk} is already assigned to {winner.vendor} "
            f"(assignment {winner.pk}, token {winner.fence_token})",
            now_assigned=winner,
        )


class ChangedSinceViewed(RefusedAtCommit):
    """A reassignment was decided against ``expected`` (the assignment the caller saw, or
    ``None`` for none) but ``current`` is active at commit; nothing was written.

    Running again with ``current`` as the one to replace replaces it knowingly.
    """

    outcome = Outcome.CONFLICT

    def __init__(
        self,
        *,
        complaint: Complaint,
        expected: VendorAssignment | None,
        current: VendorAssignment | None,
    ):
        self.complaint = complaint
        self.expected = expected
        self.current = current
        super().__init__(
            f"the assignment of complaint {complaint.pk} changed since it was viewed: "
            f"expected {_described(expected)}, found {_described(current)}",
            now_assigned=current,
        )


class AssignmentChanged(RefusedAtCommit):
    """Another attempt changed the assignment after this one decided not to call the
    vendor, and a write would now be needed; nothing was written. Trying again is safe."""

    outcome = Outcome.CONFLICT

    def __init__(self, *, complaint: Complaint, current: VendorAssignment | None):
        self.complaint = complaint
        self.current = current
        now = f"{current.vendor} (token {current.fence_token})" if current else "no vendor"
        super().__init__(
            f"the assignment of complaint {complaint.pk} changed meanwhile: {now}",
            now_assigned=current,
        )


def _described(assignment: VendorAssignment | None) -> str:
    if assignment is None:
        return "no vendor"
    return f"{assignment.vendor} (assignment {assignment.pk}, token {assignment.fence_token})"


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
    ``LockHeld`` (another attempt holds the lease), ``LockUnavailable`` (Redis down),
    ``DispatchFailed``, ``StaleFencingToken`` (a newer attempt took over),
    ``AlreadyAssigned``, ``ChangedSinceViewed`` and ``AssignmentChanged`` with nothing
    written.
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
    label = _actor_label(actor, via)
    resource = assignment_resource(complaint.pk)
    attempt = Attempt(
        actor=label, operation=OPERATION, scope=scope_for_organization(organization), ip=ip
    )
    if not _may_assign(actor, organization):
        record_fence_event(
            resource=resource,
            outcome=Outcome.DENIED,
            actor=label,
            detail=f"not staff of {organization.slug} with {ASSIGN_PERMISSION}",
            scope=attempt.scope,
            operation=OPERATION,
            ip=ip,
        )
        raise NotAllowed(actor=actor, organization=organization)
    _check_contract(vendor, organization, timezone.localdate())

    def work(lease: Lease) -> AssignmentResult:
        looked = _look_before_calling(complaint, lease.token)
        needs_call = _next_step(looked, vendor, reassign, replacing) is _Next.ASSIGN
        dispatched = False
        if needs_call:
            try:
                call = dispatch_assignment(
                    complaint=complaint, vendor=vendor, replacing=looked, token=lease.token
                )
            except ExternalCallFailed as exc:
                raise DispatchFailed(
                    complaint=complaint, vendor=vendor, reason=exc.reason, status=exc.status
                ) from exc
            dispatched = not call.skipped
        try:
            with transaction.atomic():
                # Fence first: a holder whose lease was taken over learns it here, even
                # when the work it came for has been done meanwhile.
                advance_fence(Complaint.objects.filter(pk=complaint.pk), lease)
                # The fence UPDATE holds the complaint's row lock until commit, so every
                # fenced writer of this complaint reads the assignment state in turn.
                current = active_assignment(complaint)
                step = _next_step(current, vendor, reassign, replacing)
                if step is _Next.ALREADY_DONE:
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
                    actor_label=label,
                )
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

    return run_fenced(
        resource,
        work,
        ttl=timedelta(seconds=settings.VENDOR_LOCK_TTL_SECONDS),
        # Refusals are recorded with the outcome their exception declares; the detail
        # (the exception's text) names the vendor that holds the complaint, and the vendor
        # told in vain.
        attempt=attempt,
    )


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


def _look_before_calling(complaint: Complaint, token: int) -> VendorAssignment | None:
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
    return VendorAssignment.objects.select_related("vendor").filter(pk=current_id).first()


def _may_assign(actor, organization: Organization) -> bool:
    if actor is None:
        return True  # the operator at the shell: already holds the deployment's keys
    return organization.has_staff(actor) and actor.has_perm(ASSIGN_PERMISSION)


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


def _actor_label(actor, via: str) -> str:
    name = actor.get_username() if actor is not None else ""
    return " via ".join(part for part in (name, via) if part) or "system"
