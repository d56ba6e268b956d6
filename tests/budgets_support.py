"""Helpers shared by the tests of the third operation (``tests.budgets``): its fixtures,
one call of the service, and what it left in PostgreSQL and the audit."""

from decimal import Decimal

import pytest

from locking.keys import lock_key
from locking.models import FenceEvent
from tests.budgets.models import AnnualBudget
from tests.budgets.operations import budget_resource
from tests.budgets.services import approve_budget
from tests.harness.waiting import wait_until

YEAR = 2027
AMOUNT = Decimal("120000.00")


@pytest.fixture
def budget(maple) -> AnnualBudget:
    """Maple Court's draft budget for ``YEAR``."""
    return AnnualBudget.objects.create(organization=maple, year=YEAR, amount=AMOUNT)


@pytest.fixture
def board(settings, http_stub):
    """The board notification endpoint, pointed at the stand-in."""
    settings.BUDGET_NOTIFICATION_URL = http_stub.url_for("budgets")
    return http_stub


def approve(organization, actor="cron-a", year=YEAR):
    """A string ``actor`` is a system caller: no user, recorded by its ``via``."""
    if isinstance(actor, str):
        return approve_budget(organization=organization, year=year, actor=None, via=actor)
    return approve_budget(organization=organization, year=year, actor=actor)


def events(organization, year=YEAR) -> list[tuple[str, int | None]]:
    """The audit's ``(outcome, token)`` of the budget's attempts, in the order recorded."""
    rows = FenceEvent.objects.for_resource(budget_resource(organization, year)).order_by("id")
    return list(rows.values_list("outcome", "token"))


def state_of(budget: AnnualBudget) -> tuple[str, str, int, Decimal]:
    """What an approval writes: ``(status, approved_by, last_fence_token, amount)``."""
    budget.refresh_from_db()
    return (budget.status, budget.approved_by, budget.last_fence_token, budget.amount)


def wait_for_lease_expiry(redis_client, organization, year=YEAR) -> None:
    key = lock_key(budget_resource(organization, year))
    wait_until(lambda: not redis_client.exists(key), what=f"{key} to expire")
