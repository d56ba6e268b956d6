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
"""

import logging
from dataclasses import dataclass
from datetime import date, timedelta
from enum import Enum

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from hoa import resources
from hoa.models import Complaint, Organization
from hoa.outbound import ExternalCallFailed
from hoa.scopes import scope_for_organization
from locking import Attempt, Lease, StaleFencingToken, advance_fence, record_fence_event, run_fenced
from vendors.dispatch import dispatch_assignment
from vendors.models import Vendor, VendorAssignment, VendorContract
from vendors.selectors import active_assignment

logger = logging.getLogger(__name__)

OPERATION = "vendor-assignment"
ASSIGN_PERMISSION = "vendors.assign_vendor"

# FenceEvent outcomes this operation records besides the ones run_fenced records itself.
COMMITTED = "committed"
ALREADY_DONE = "already_done"
FAILED = "failed"
DENIED = "denied"


def assignment_resource(complaint_id: int) -> str:
    """Return the lock resource of one complaint's vendor assignment."""
    return resources.assignment_resource(complaint_id)


# --- Exceptions --------------------------------------------------------------------------


class VendorsError(Exception):
    """Base class of everything the vendors app raises on purpose."""


class NotAllowed(VendorsError):
    """The actor may not assign vendors for the complaint's organization; nothing locked."""

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

    def __init__(self, *, complaint: Complaint, vendor: Vendor, reason: str, status=None):
        self.complaint = complaint
        self.vendor = vendor
        self.reason = reason
        self.status = status
        super().__init__(f"dispatch of {vendor} to complaint {complaint.pk} failed: {reason}")


class AlreadyAssigned(VendorsError):
    """Another vendor is actively assigned and ``reassign`` was not asked; nothing written."""

    def __init__(self, *, complaint: Complaint, winner: VendorAssignment):
        self.complaint = complaint
        self.winner = winner
        super().__init__(
            f"complaint {complaint.pk} is already assigned to {winner.vendor} "
            f"(assignment {winner.pk}, token {winner.fence_token})"
        )


class AssignmentChanged(VendorsError):
    """Another attempt changed the assignment after this one decided not to call the
    vendor, and a write would now be needed; nothing was written. Trying again is safe."""

    def __init__(self, *, complaint: Complaint, current: VendorAssignment | None):
        self.complaint = complaint
        self.current = current
        now = f"{current.vendor} (token {current.fence_token})" if current else "no vendor"
        super().__init__(f"the assignment of complaint {complaint.pk} changed meanwhile: {now}")


# --- Result ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AssignmentResult:
    """What ``assign_vendor`` did. ``outcome`` is the FenceEvent outcome it recorded."""

    assignment: VendorAssignment  # the active assignment of the vendor asked for
    outcome: str  # COMMITTED or ALREADY_DONE
    token: int
    replaced: VendorAssignment | None = None  # the assignment this call deactivated
    dispatched: bool = False  # the dispatch service was called (not skipped, not needed)

    @property
    def already_done(self) -> bool:
        return self.outcome == ALREADY_DONE


# --- The operation -----------------------------------------------------------------------


class _Next(Enum):
    """What the state of the complaint asks of an attempt."""

    ALREADY_DONE = "already_done"  # the vendor asked for is the active one
    REFUSE = "refuse"  # another vendor is active and reassign was not asked
    ASSIGN = "assign"  # write a new active assignment


def _next_step(current: VendorAssignment | None, vendor: Vendor, reassign: bool) -> _Next:
    if current is not None and current.vendor_id == vendor.pk:
        return _Next.ALREADY_DONE
    if current is not None and not reassign:
        return _Next.REFUSE
    return _Next.ASSIGN


def assign_vendor(
    *,
    complaint: Complaint,
    vendor: Vendor,
    actor,
    reassign: bool = False,
    ip: str | None = None,
    via: str = "",
) -> AssignmentResult:
    """Make ``vendor`` the complaint's active vendor, once, under the complaint's fence.

    ``actor`` is the user asking (staff of the complaint's organization with
    ``vendors.assign_vendor``, or a superuser), or ``None`` for the deployment's operator
    at the shell (a management command run without ``--actor``); ``via`` says where the
    request came from (e.g. ``cli:deploy``) for the audit trail.

    Raises ``NotAllowed`` and ``ContractNotActive`` before anything is locked;
    ``LockHeld`` (another attempt holds the lease), ``LockUnavailable`` (Redis down),
    ``DispatchFailed``, ``StaleFencingToken`` (a newer attempt took over),
    ``AlreadyAssigned`` and ``AssignmentChanged`` with nothing written.
    """
    organization = complaint.organization
    label = _actor_label(actor, via)
    resource = assignment_resource(complaint.pk)
    attempt = Attempt(
        actor=label, operation=OPERATION, scope=scope_for_organization(organization), ip=ip
    )
    if not _may_assign(actor, organization):
        record_fence_event(
            resource=resource,
            outcome=DENIED,
            actor=label,
            detail=f"not staff of {organization.slug} with {ASSIGN_PERMISSION}",
            scope=attempt.scope,
            operation=OPERATION,
            ip=ip,
        )
        raise NotAllowed(actor=actor, organization=organization)
    _check_contract(vendor, organization, timezone.localdate())

    def work(lease: Lease) -> AssignmentResult:
        current = _look_before_calling(complaint, lease.token)
        needs_call = _next_step(current, vendor, reassign) is _Next.ASSIGN
        dispatched = False
        if needs_call:
            try:
                call = dispatch_assignment(
                    complaint=complaint, vendor=vendor, replacing=current, token=lease.token
                )
            except ExternalCallFailed as exc:
                raise DispatchFailed(
                    complaint=complaint, vendor=vendor, reason=exc.reason, status=exc.status
                ) from exc
            dispatched = not call.skipped
        with transaction.atomic():
            # Fence first: a holder whose lease was taken over learns it here, even when
            # the work it came for has been done meanwhile.
            advance_fence(Complaint.objects.filter(pk=complaint.pk), lease)
            # The fence UPDATE holds the complaint's row lock until commit, so every
            # fenced writer of this complaint reads the assignment state in turn.
            current = active_assignment(complaint)
            step = _next_step(current, vendor, reassign)
            if step is _Next.ALREADY_DONE:
                return AssignmentResult(assignment=current, outcome=ALREADY_DONE, token=lease.token)
            if step is _Next.REFUSE:
                raise AlreadyAssigned(complaint=complaint, winner=current)
            if not needs_call:
                # An older holder committed between our look and our fence; we did not
                # call the vendor, so we must not record them as sent.
                raise AssignmentChanged(complaint=complaint, current=current)
            now = timezone.now()
            if current is not None:
                # Before the insert: the one-active-per-complaint index is not deferrable.
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
        logger.info(
            "vendor assigned",
            extra={
                "resource": resource,
                "token": lease.token,
                "outcome": COMMITTED,
                "complaint": complaint.pk,
                "vendor": vendor.pk,
                "replaced": current.pk if current else None,
            },
        )
        return AssignmentResult(
            assignment=assignment,
            outcome=COMMITTED,
            token=lease.token,
            replaced=current,
            dispatched=dispatched,
        )

    return run_fenced(
        resource,
        work,
        ttl=timedelta(seconds=settings.VENDOR_LOCK_TTL_SECONDS),
        attempt=attempt,
        # Both refusals mean "another attempt settled this complaint's assignment": the
        # detail (the exception's text) names the vendor that holds it.
        errors={
            DispatchFailed: FAILED,
            AlreadyAssigned: ALREADY_DONE,
            AssignmentChanged: ALREADY_DONE,
        },
    )


def _look_before_calling(complaint: Complaint, token: int) -> VendorAssignment | None:
    """Return the active assignment, or raise ``StaleFencingToken`` if ``token`` cannot win.

    Only spares the vendor a call that cannot lead anywhere: the conditional UPDATE in
    ``advance_fence`` is what decides. A token at or below the recorded one means a newer
    holder took over, or Redis lost its counter; raising here lets ``run_fenced`` tell the
    two apart and reseed before the vendor ever sees a doomed token.
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
