"""Budget approval: approve an association's annual budget exactly once, under a fenced
lease, after telling the board.

``approve_budget`` reads top to bottom: check the actor, find the budget (nothing locked
yet), then run one attempt's steps under the budget's lease (``hoa.fenced``, the runner
every operation shares), in this order:

1. ``look``: the budget as it is now; an approved one is final, nothing to notify.
2. ``call_outside``: one board notification carrying the token and the idempotency key
   (failure: ``CallFailed``, nothing written).
3. ``fence_row`` and ``commit``, in one transaction: ``advance_fence`` on the budget row (a
   holder whose lease was re-granted: ``Superseded``), then the state check (already
   approved: done; an amount other than the one the board was told: ``AmountChanged``),
   then the approval.

Actors: a user must be staff of the organization and hold ``budgets.approve_budget``
(``NotPermitted``, recorded as an ``AccessDenial``, otherwise); ``None`` is the deployment's
operator at the shell.
"""

from dataclasses import dataclass

from django.db.models import QuerySet
from django.utils import timezone

from hoa.fenced import FencedSteps, Look, Result
from hoa.models import Organization
from locking import Lease, Outcome
from tests.budgets import answers, notify
from tests.budgets.exceptions import AmountChanged, NoBudget
from tests.budgets.models import AnnualBudget
from tests.budgets.operations import APPROVAL, budget_resource


def approve_budget(
    *, organization: Organization, year: int, actor, via: str = "", ip: str | None = None
) -> Result:
    """Approve ``organization``'s budget for ``year`` exactly once, under a fenced lease.

    ``actor`` is the user asking, or ``None`` for the operator at the shell; ``via`` says
    where the request came from (e.g. ``cli:ops``) for the audit trail.
    """
    resource = budget_resource(organization, year)
    call = APPROVAL.begin(actor, organization=organization, resource=resource, via=via, ip=ip)
    budget = AnnualBudget.objects.for_organization(organization).filter(year=year).first()
    if budget is None:
        raise NoBudget(organization=organization, year=year)
    budget.organization = organization
    return call.run(Approval(budget=budget, by=call.label))


@dataclass(frozen=True)
class Looked(Look):
    budget: AnnualBudget  # as it was before the call (``fenced``)


@dataclass(frozen=True)
class Approval(FencedSteps):
    """One attempt at approving a budget, as the runner's steps (``hoa.fenced``)."""

    budget: AnnualBudget
    by: str  # who asked, as the budget records it

    endpoint = "board-notification"
    party = notify.BOARD

    @property
    def subject(self) -> dict:
        return {"organization": self.budget.organization, "year": self.budget.year}

    def rows(self) -> QuerySet:
        return AnnualBudget.objects.filter(pk=self.budget.pk)

    def look(self, lease: Lease) -> Looked:
        budget = self.rows().get()
        budget.organization = self.budget.organization
        # Final once approved: nothing to tell. The commit still checks the fence first.
        return Looked(budget=budget, needs_call=not budget.is_approved, fenced=budget)

    def call_outside(self, lease: Lease, looked: Looked) -> str | None:
        call = notify.send_approval(budget=looked.budget, token=lease)
        return None if call.skipped else notify.BOARD

    def fence_row(self, looked: Looked) -> QuerySet:
        return self.rows()

    def commit(self, lease: Lease, looked: Looked, told) -> Result:
        # The fence UPDATE holds the row lock: this read sees the latest committed state.
        budget = self.rows().get()
        budget.organization = self.budget.organization
        if budget.is_approved:
            return Result(Outcome.ALREADY_DONE, lease.token, budget, answers.result_message)
        if budget.amount != looked.budget.amount:  # the board was told another amount
            raise AmountChanged(**self.subject, notified=looked.budget.amount, amount=budget.amount)
        budget.status = AnnualBudget.Status.APPROVED
        budget.approved_at = timezone.now()
        budget.approved_by = self.by[:200]
        budget.save(update_fields=["status", "approved_at", "approved_by"])
        return Result(Outcome.COMMITTED, lease.token, budget, answers.result_message)
