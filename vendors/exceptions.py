"""What vendor assignment raises on purpose. Nothing was written in any of these cases.

Each says which kind of answer it is (``hoa.web.answer_table``) and, when it answers a fenced
attempt, the ``outcome`` ``run_fenced`` records. ``exc.message`` is the sentence a person
reads (``vendors.answers``); ``str(exc)``, the audit's detail, may add what happened to a
vendor told in vain.
"""

from datetime import date

from django.utils.translation import gettext_lazy as _

from hoa.models import Complaint, Organization
from hoa.web.answer_table import Answer, Refusal
from locking import LockHeld, Outcome, StaleFencingToken
from vendors import answers
from vendors.models import Vendor, VendorAssignment, VendorContract


class VendorsError(Refusal):
    """Base class of everything vendor assignment raises on purpose."""


class NotAllowed(VendorsError):
    """The actor may not assign vendors for the complaint's organization; nothing locked."""

    answer = Answer.FORBIDDEN
    outcome = Outcome.DENIED  # raised before any lease: recorded as an AccessDenial
    title = _("Not allowed")

    def __init__(self, *, actor: str, organization: Organization):
        self.actor = actor
        self.organization = organization
        super().__init__(answers.not_allowed(organization))


class ContractNotActive(VendorsError):
    """No contract between the vendor and the organization covers the day; nothing locked.

    ``contract`` is the nearest one (the next to start, else the last to end), or ``None``
    when the vendor never had a contract with the organization.
    """

    answer = Answer.BAD_REQUEST
    title = _("No contract")

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
        super().__init__(answers.contract_not_active(vendor, organization, day, contract))

    @property
    def starts_later(self) -> bool:
        return self.contract is not None and self.contract.starts_on > self.day


class AssignmentBusy(VendorsError):
    """Another attempt holds the complaint's lease right now."""

    answer = Answer.RETRY
    outcome = Outcome.BUSY
    title = _("Assignment in progress")

    def __init__(self, *, complaint: Complaint, lock: LockHeld):
        self.complaint = complaint
        self.busy = lock  # what the 409 page shows: holder, since, until
        self.holder = lock.holder or str(_("another worker"))
        super().__init__(answers.busy(complaint, self.holder, lock.retry_after))


class AssignmentSuperseded(VendorsError):
    """This attempt's lease ran out and a newer attempt took over."""

    answer = Answer.RETRY
    outcome = Outcome.STALE
    title = _("A newer assignment took over")

    def __init__(self, *, complaint: Complaint, stale: StaleFencingToken):
        self.complaint = complaint
        self.token = stale.token
        self.recorded = stale.recorded
        super().__init__(answers.superseded(complaint, stale.token, stale.recorded))


class LockServiceUnavailable(VendorsError):
    """Redis could not be reached."""

    answer = Answer.UNAVAILABLE
    outcome = Outcome.UNAVAILABLE
    title = _("Lock service unavailable")

    def __init__(self, *, complaint: Complaint, reason: str):
        self.complaint = complaint
        self.reason = reason
        super().__init__(answers.lock_service_down(reason))


class DispatchFailed(VendorsError):
    """The dispatch service refused, failed or timed out."""

    answer = Answer.UPSTREAM_FAILED
    outcome = Outcome.FAILED
    title = _("Vendor dispatch failed")

    def __init__(self, *, complaint: Complaint, vendor: Vendor, reason: str, status=None):
        self.complaint = complaint
        self.vendor = vendor
        self.reason = reason
        self.status = status
        super().__init__(answers.dispatch_failed(reason))


class RefusedAtCommit(VendorsError):
    """A refusal decided by the state check inside the transaction.

    The attempt may have told its vendor before (the dispatch call precedes the
    transaction): then ``told_in_vain`` is that vendor and ``cancellation`` what the
    best-effort cancellation got, and ``str(exc)`` (the audit detail) says both.
    """

    answer = Answer.RETRY
    told_in_vain: Vendor | None = None
    cancellation: str = ""

    def __init__(self, message: str, *, complaint: Complaint, now_assigned):
        self.complaint = complaint
        self.now_assigned: VendorAssignment | None = now_assigned  # active at the refusal
        super().__init__(message)

    def __str__(self) -> str:
        if self.told_in_vain is None:
            return self.message
        told = answers.told_in_vain(self.told_in_vain, self.cancellation)
        return f"{self.message.rstrip('.')}; {told}"


class AlreadyAssigned(RefusedAtCommit):
    """Another vendor is actively assigned and ``reassign`` was not asked.

    Recorded as already done: another attempt settled the complaint.
    """

    outcome = Outcome.ALREADY_DONE
    title = _("This complaint already has a vendor")

    def __init__(self, *, complaint: Complaint, winner: VendorAssignment):
        self.winner = winner
        super().__init__(
            answers.already_assigned(complaint, winner), complaint=complaint, now_assigned=winner
        )


class ChangedSinceViewed(RefusedAtCommit):
    """A reassignment was decided against ``expected`` (the assignment the caller saw, or
    ``None`` for none) but ``current`` is active at commit.

    Running again with ``current`` as the one to replace replaces it knowingly.
    """

    outcome = Outcome.CONFLICT
    title = _("Changed since you looked")

    def __init__(
        self,
        *,
        complaint: Complaint,
        expected: VendorAssignment | None,
        current: VendorAssignment | None,
    ):
        self.expected = expected
        self.current = current
        super().__init__(
            answers.changed_since_viewed(complaint, current),
            complaint=complaint,
            now_assigned=current,
        )


class AssignmentChanged(RefusedAtCommit):
    """Another attempt changed the assignment after this one decided not to call the
    vendor, and a write would now be needed. Trying again is safe."""

    outcome = Outcome.CONFLICT
    title = _("The vendor changed meanwhile")

    def __init__(self, *, complaint: Complaint, current: VendorAssignment | None):
        self.current = current
        super().__init__(
            answers.assignment_changed(complaint, current),
            complaint=complaint,
            now_assigned=current,
        )
