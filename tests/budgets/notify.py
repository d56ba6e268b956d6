"""The board notification client: one fenced POST per approval, called only by the service.

``BUDGET_NOTIFICATION_URL`` is this app's setting, with its default here (empty: the call
is skipped, and logged). ``Idempotency-Key: budget-approval:<org_id>:<year>:<amount>``
lets the receiver collapse retries of the same approval; ``X-Fencing-Token`` lets it refuse
a holder older than one it has already seen.
"""

from django.conf import settings
from django.utils.translation import gettext_lazy

from hoa.integrations.webhooks import CallResult, post_fenced
from tests.budgets.models import AnnualBudget

# Whom an approval tells, as an audit line names it.
BOARD = gettext_lazy("the board")
# The endpoint the call is sealed for: the board's receiver's scope.
ENDPOINT = "budgets"


def notification_url() -> str:
    return getattr(settings, "BUDGET_NOTIFICATION_URL", "")


def idempotency_key(budget: AnnualBudget) -> str:
    return f"budget-approval:{budget.organization_id}:{budget.year}:{budget.amount}"


def send_approval(*, budget: AnnualBudget, token) -> CallResult:
    """POST the approval to the board once; raise ``ExternalCallFailed``."""
    organization = budget.organization
    payload = {
        "event": "budget.approved",
        "organization": {"id": organization.pk, "slug": organization.slug},
        "year": budget.year,
        "amount": str(budget.amount),
    }
    return post_fenced(
        notification_url(),
        payload,
        idempotency_key=idempotency_key(budget),
        token=token,
        endpoint=ENDPOINT,
    )
