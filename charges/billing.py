"""The billing webhook client: one fenced POST per charge run, called only by the services.

The receiver gets the whole run in one request (not one per unit). Two headers make a
repeated or late call harmless: ``Idempotency-Key: monthly-charges:<org_id>:<YYYY-MM>``
lets it collapse retries of the same run, and ``X-Fencing-Token`` lets it refuse a holder
older than one it has already seen.
"""

from datetime import date
from decimal import Decimal
from typing import NamedTuple

from django.conf import settings
from django.utils.translation import gettext_lazy

from charges.models import month_label
from hoa.integrations.webhooks import CallResult, post_fenced
from hoa.models import Organization

# Whom a billing call tells, as an audit line names it.
BILLING_SYSTEM = gettext_lazy("the billing system")
# The endpoint the call is sealed for: the billing service's receiver's scope.
ENDPOINT = "billing"


class ChargeLine(NamedTuple):
    """One unit's charge: what is billed and, in the same form, what is inserted.

    A named tuple: a run makes one per unit (5,000 in a large association), built straight
    from the query's rows."""

    unit_id: int
    unit_label: str
    amount: Decimal


def idempotency_key(organization: Organization, month: date) -> str:
    return f"monthly-charges:{organization.pk}:{month_label(month)}"


def lines_total(lines: list[ChargeLine]) -> Decimal:
    return sum((line.amount for line in lines), Decimal("0.00"))


def send_charge_run(
    *, organization: Organization, month: date, lines: list[ChargeLine], token
) -> CallResult:
    """POST the run's charges to ``BILLING_WEBHOOK_URL`` once, under ``token`` (the lease);
    raise ``ExternalCallFailed``.

    Skipped (and logged) when no URL is configured.
    """
    payload = {
        "organization": {
            "id": organization.pk,
            "slug": organization.slug,
            "name": organization.name,
        },
        "month": month_label(month),
        "charge_count": len(lines),
        "total": lines_total(lines),
        # Amounts as strings, as the JSON encoder would write a Decimal, without its
        # per-value fallback call.
        "lines": [{"unit": line.unit_label, "amount": str(line.amount)} for line in lines],
    }
    return post_fenced(
        settings.BILLING_WEBHOOK_URL,
        payload,
        idempotency_key=idempotency_key(organization, month),
        token=token,
        endpoint=ENDPOINT,
    )
