"""The payment client: ask the payment service to pay one approved invoice.

One sealed POST per fenced attempt, before its transaction, to ``VENDOR_PAYMENT_URL``, with
``Idempotency-Key: vendor-payment:invoice:<id>`` (one per invoice, every try) and the lease's
token. Never skipped: with no URL ``vendors.payments`` refuses before the lease, and this
module raises too. What the service must do: docs/operations.md, "The payment service".
"""

import json
from dataclasses import dataclass

from django.conf import settings
from django.utils.translation import gettext_lazy

from hoa.integrations.webhooks import ExternalCallFailed, ExternalCallUnknown, post_fenced
from locking import Lease
from vendors.models import Invoice
from vendors.resources import payment_resource

# The endpoint the call is sealed for: the payment service's receiver checks it is its own.
PAYMENT_ENDPOINT = "payment"

# Whom a payment tells, as an audit line names it.
PAYMENT_SERVICE = gettext_lazy("the payment service")


@dataclass(frozen=True)
class PaymentReceipt:
    """The payment service's answer: its reference for the transfer. Read as whom the
    call told (an audit line's "the payment service was told in vain")."""

    reference: str

    def __str__(self) -> str:
        return str(PAYMENT_SERVICE)


# The key of every try of paying one invoice: its lease's resource name.
idempotency_key = payment_resource


def payment_payload(invoice: Invoice) -> dict:
    """The JSON body: the same for every try of paying the invoice (no clock values)."""
    organization, vendor = invoice.organization, invoice.vendor
    return {
        "event": "invoice.pay",
        "organization": {"id": organization.pk, "slug": organization.slug},
        "vendor": {"id": vendor.pk, "name": vendor.name, "email": vendor.email},
        "invoice": {
            "id": invoice.pk,
            "number": invoice.number,
            "amount": str(invoice.amount),
            "currency": settings.CURRENCY,
            "issued_on": invoice.issued_on.isoformat(),
            "due_on": invoice.due_on.isoformat(),
        },
    }


def send_payment(*, invoice: Invoice, lease: Lease) -> PaymentReceipt:
    """POST the payment once under ``lease``; return the service's reference. Raise
    ``StaleAtReceiver`` (it has a newer call for the invoice) or ``ExternalCallFailed``."""
    url = settings.VENDOR_PAYMENT_URL
    if not url:
        raise ExternalCallFailed(url, "VENDOR_PAYMENT_URL is not set")
    call = post_fenced(
        url,
        payment_payload(invoice),
        idempotency_key=idempotency_key(invoice.pk),
        token=lease,
        endpoint=PAYMENT_ENDPOINT,
    )
    try:
        reference = json.loads(call.content)["reference"]
    except (ValueError, TypeError, KeyError):
        reference = None
    if not isinstance(reference, str) or not 0 < len(reference) <= 200:
        # A 2xx we cannot read: it may have paid. Unknown, settled by the same key.
        raise ExternalCallUnknown(
            url,
            "an answer without a payment reference",
            call.status,
            idempotency_key=idempotency_key(invoice.pk),
            endpoint=PAYMENT_ENDPOINT,
        )
    return PaymentReceipt(reference=reference)
