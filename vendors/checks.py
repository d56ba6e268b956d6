"""System checks of vendors, run by ``manage.py check`` (``--deploy`` for the last)."""

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.compatibility, deploy=True)
def payment_service_configured(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """``vendors.E001``: no payment service, so no invoice can be paid.

    Paying is never skipped like the notice webhooks (billing, dispatch): with no URL it is
    refused, so that no payment is recorded that did not happen. A deployment without one
    cannot pay its vendors: ``check --deploy`` says so before it goes live.
    """
    if getattr(settings, "VENDOR_PAYMENT_URL", ""):
        return []
    return [
        checks.Error(
            "VENDOR_PAYMENT_URL is not set: paying a vendor invoice is refused (503, exit 1).",
            hint="Set VENDOR_PAYMENT_URL to the payment service's endpoint (docs/operations.md, "
            "'The payment service').",
            id="vendors.E001",
        )
    ]
