"""Budget approval: an association's annual budget approved exactly once, under a fenced
lease, after the board is told (``approve_budget``, its steps, the board's client)."""

from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from hoa.fenced import FencedSteps, Look, Result
from hoa.integrations.webhooks import CallResult, post_fenced
from hoa.models import Organization
from locking import Lease, Outcome
from tests.budgets import answers
from tests.budgets.answers import AmountChanged, InvalidYear, NoBudget
from tests.budgets.models import AnnualBudget
from tests.budgets.operations import APPROVAL, budget_resource


def parse_year(value: str) -> int:
    """Return the year ``value`` (``YYYY`` in ASCII digits, 0001 to 9999), or raise
    ``InvalidYear``."""
    text = value.strip() if isinstance(value, str) else ""
    if not (len(text) == 4 and text.isascii() and text.isdigit()) or int(text) < 1:
        raise InvalidYear(value)
    return int(text)


def approve_budget(
    *, organization: Organization, year: int, actor, via: str = "", ip: str | None = None
) -> Result:
    """Approve ``organization``'s budget for ``year`` exactly once, under a fenced lease, as
    ``actor`` (a user, or ``None``: the operator at the shell, ``via`` e.g. ``cli:ops``)."""
    resource = budget_resource(organization, year)
    call = APPROVAL.begin(actor, organization=organization, resource=resource, via=via, ip=ip)
    budget = AnnualBudget.objects.for_organization(organization).filter(year=year).first()
    if budget is None:
        raise NoBudget(organization=organization, year=year)
    budget.organization = organization
    return call.run(Approval(budget=budget, by=call.label))


@dataclass(frozen=True)
class Approval(FencedSteps):
    """One attempt at approving a budget, as the runner's steps (``hoa.fenced``)."""

    budget: AnnualBudget
    by: str  # who asked, as the budget records it

    endpoint = "board-notification"

    @property
    def subject(self) -> dict:
        return {"organization": self.budget.organization, "year": self.budget.year}

    def read(self) -> AnnualBudget:
        return AnnualBudget.objects.select_related("organization").get(pk=self.budget.pk)

    def look(self, lease: Lease) -> Look:
        budget = self.read()  # the row the runner fences; final once approved: nothing to tell
        return Look(needs_call=not budget.is_approved, fenced=budget)

    def call_outside(self, lease: Lease, found: Look) -> CallResult:
        return send_approval(budget=found.fenced, token=lease)

    def commit(self, lease: Lease, found: Look, receipt) -> Result:
        budget = self.read()  # the fence UPDATE holds the row lock: the latest committed state
        if budget.is_approved:
            return Result(Outcome.ALREADY_DONE, lease.token, budget, answers.result_message)
        if budget.amount != found.fenced.amount:  # the board was told another amount
            raise AmountChanged(**self.subject, notified=found.fenced.amount, amount=budget.amount)
        budget.status = AnnualBudget.Status.APPROVED
        budget.approved_at = timezone.now()
        budget.approved_by = self.by[:200]
        budget.save(update_fields=["status", "approved_at", "approved_by"])
        return Result(Outcome.COMMITTED, lease.token, budget, answers.result_message)


def send_approval(*, budget: AnnualBudget, token) -> CallResult:
    """POST the approval to the board once (``BUDGET_NOTIFICATION_URL``; unset: skipped);
    raise ``ExternalCallFailed``. Its key collapses retries of the same approval."""
    organization = budget.organization
    payload = {
        "event": "budget.approved",
        "organization": {"id": organization.pk, "slug": organization.slug},
        "year": budget.year,
        "amount": str(budget.amount),
    }
    return post_fenced(
        getattr(settings, "BUDGET_NOTIFICATION_URL", ""),
        payload,
        idempotency_key=f"budget-approval:{organization.pk}:{budget.year}:{budget.amount}",
        token=token,
        endpoint="budgets",  # what the call is sealed for
    )
