"""What vendor assignment raises on purpose. Nothing was written in any of these cases.

Each says which kind of answer it is (``hoa.answers.table``) and, when it answers a fenced
attempt, the ``outcome`` ``run_fenced`` records. ``exc.message`` is the sentence staff
read (``vendors.answers``); ``str(exc)``, the operators' (the command's line, the audit's
detail), names tokens and may add what happened to a vendor told in vain.
"""

from datetime import date
from functools import partial

from django.utils.translation import gettext_lazy as _

from hoa.answers.table import Answer, Audience, Refusal
from hoa.fenced import CallFailed, NotPermitted, lock_refusals
from hoa.models import Complaint, Organization
from locking import Outcome
from vendors import answers
from vendors.models import Vendor, VendorAssignment, VendorContract


class VendorsError(Refusal):
    """Base class of everything vendor assignment raises on purpose."""


class NotAllowed(NotPermitted, VendorsError):
    sentence = staticmethod(answers.not_allowed)


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


class DispatchFailed(CallFailed, VendorsError):
    title = _("Vendor dispatch failed")
    sentence = staticmethod(answers.dispatch_failed)


class RefusedAtCommit(VendorsError):
    """A refusal decided by the state check inside the transaction.

    The attempt may have told its vendor before (the dispatch call precedes the
    transaction): then ``told_in_vain`` is that vendor and ``cancellation`` what the
    best-effort cancellation got, and ``str(exc)`` (the audit detail) says both.
    """

    answer = Answer.RETRY
    told_in_vain: Vendor | None = None
    cancellation: str = ""

    def __init__(self, sentence, *, complaint: Complaint, now_assigned):
        """``sentence(audience=…)``: the answers function, for staff and for operators."""
        self.complaint = complaint
        self.now_assigned: VendorAssignment | None = now_assigned  # active at the refusal
        super().__init__(
            sentence(audience=Audience.STAFF), detail=sentence(audience=Audience.OPERATORS)
        )

    def __str__(self) -> str:
        detail = super().__str__()
        if self.told_in_vain is None:
            return detail
        told = answers.told_in_vain(self.told_in_vain, self.cancellation)
        return f"{detail.rstrip('.')}; {told}"


class AlreadyAssigned(RefusedAtCommit):
    """Another vendor is actively assigned and ``reassign`` was not asked.

    Recorded as already done: another attempt settled the complaint.
    """

    outcome = Outcome.ALREADY_DONE
    title = _("This complaint already has a vendor")

    def __init__(self, *, complaint: Complaint, winner: VendorAssignment):
        self.winner = winner
        super().__init__(
            partial(answers.already_assigned, complaint, winner),
            complaint=complaint,
            now_assigned=winner,
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
            partial(answers.changed_since_viewed, complaint, current),
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
            partial(answers.assignment_changed, complaint, current),
            complaint=complaint,
            now_assigned=current,
        )


# Locking's four refusals in this app's words; FencedOperation raises them.
LOCK_REFUSALS = lock_refusals(VendorsError, answers, prefix="Assignment")
(
    AssignmentBusy,
    AssignmentSuperseded,
    AssignmentLeaseLost,
    LockServiceUnavailable,
) = LOCK_REFUSALS
