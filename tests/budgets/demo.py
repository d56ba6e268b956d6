"""The budgets' part of the demo data (``manage.py seed_demo``). Idempotent."""

from decimal import Decimal

from django.utils import timezone

from hoa.models import Organization
from tests.budgets.models import AnnualBudget


def seed_demo(organizations: dict[str, Organization]) -> None:
    """A draft budget for this year, waiting to be approved, in each demo association."""
    year = timezone.localdate().year
    for organization in organizations.values():
        AnnualBudget.objects.get_or_create(
            organization=organization, year=year, defaults={"amount": Decimal("120000.00")}
        )
