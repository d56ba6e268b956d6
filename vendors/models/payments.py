"""Payments of vendor invoices: one per invoice, recorded by the fenced payment only."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hoa.tenancy import TenantQuerySet
from vendors.models.invoices import Invoice


class VendorPaymentQuerySet(TenantQuerySet):
    tenant_path = "invoice__organization"


class VendorPayment(models.Model):
    """What the payment service paid for an invoice, recorded in the transaction that
    checks the fence (on the invoice's row) and the invoice's state (``vendors.payments``).
    One per invoice (a one-to-one key): a later holder finds it and answers "already
    paid". ``fence_token`` is the token of the lease it was recorded under."""

    invoice = models.OneToOneField(Invoice, on_delete=models.PROTECT, related_name="payment")
    amount = models.DecimalField(_("amount"), max_digits=12, decimal_places=2)
    currency = models.CharField(_("currency"), max_length=3)
    # The payment service's reference for the transfer.
    reference = models.CharField(_("payment reference"), max_length=200)
    paid_at = models.DateTimeField(_("paid at"), default=timezone.now)
    paid_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("paid by"),
    )
    actor_label = models.CharField(_("actor"), max_length=200, blank=True, default="")
    fence_token = models.BigIntegerField(_("fencing token"))

    objects = VendorPaymentQuerySet.as_manager()

    class Meta:
        ordering = ["-paid_at", "-pk"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="payment_amount_positive"),
            models.CheckConstraint(condition=Q(fence_token__gt=0), name="payment_token_positive"),
        ]

    def __str__(self):
        return f"{self.invoice}: {self.amount} {self.currency} ({self.reference})"
