"""Outside calls whose outcome is not known yet, kept until they are settled.

A fenced operation's call to the outside (billing, dispatch, payment) ends done, refused
or unknown (hoa/integrations/webhooks.py). An unknown one (a timeout, a lost connection, a
redirect, a 5xx) may have been acted on: the runner records it here, in its own committed
statement, and ``settle_outside_calls`` settles it later by the same idempotency key, as
the operation's declaration says (retried, or taken back). docs/threat-model.md, "What the
outside was told".
"""

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hoa.models.organizations import Organization, TenantQuerySet


class OutsideCallQuerySet(TenantQuerySet):
    def unsettled(self):
        return self.filter(settled_at__isnull=True)


class OutsideCall(models.Model):
    """One idempotency key whose last call's outcome is unknown, until it is settled."""

    class Settlement(models.TextChoices):
        DONE = "done", _("Done: recorded")
        REFUSED = "refused", _("Refused: nothing was done")
        TAKEN_BACK = "taken_back", _("Taken back")
        NOT_NEEDED = "not_needed", _("No longer needed")

    operation = models.CharField(_("operation"), max_length=50)
    resource = models.CharField(_("resource"), max_length=200)
    endpoint = models.CharField(_("endpoint"), max_length=50)
    idempotency_key = models.CharField(_("idempotency key"), max_length=200)
    token = models.BigIntegerField(_("fencing token"))
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="outside_calls"
    )
    reason = models.CharField(_("why unknown"), max_length=200)
    actor = models.CharField(_("asked by"), max_length=200)
    recorded_at = models.DateTimeField(_("recorded at"), default=timezone.now)
    tries = models.PositiveIntegerField(_("settling tries"), default=0)
    settled_at = models.DateTimeField(_("settled at"), null=True, blank=True)
    settlement = models.CharField(
        _("settlement"), max_length=20, choices=Settlement.choices, blank=True, default=""
    )
    detail = models.TextField(_("detail"), blank=True, default="")

    objects = OutsideCallQuerySet.as_manager()

    class Meta:
        ordering = ["recorded_at"]
        verbose_name = _("outside call not known yet")
        verbose_name_plural = _("outside calls not known yet")
        constraints = [
            # One row per key and endpoint: a key whose call is unknown again reopens it.
            models.UniqueConstraint(
                fields=["endpoint", "idempotency_key"], name="outside_call_one_per_key"
            ),
            models.CheckConstraint(
                condition=Q(settled_at__isnull=True, settlement="")
                | Q(settled_at__isnull=False) & ~Q(settlement=""),
                name="outside_call_settled_with_its_settlement",
            ),
        ]
        indexes = [
            models.Index(
                fields=["recorded_at"],
                condition=Q(settled_at__isnull=True),
                name="outside_call_unsettled",
            )
        ]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.idempotency_key}"

    @property
    def is_settled(self) -> bool:
        return self.settled_at is not None


def record_unknown(
    *,
    operation: str,
    resource: str,
    endpoint: str,
    idempotency_key: str,
    token: int,
    organization: Organization,
    reason: str,
    actor: str,
    using: str | None = None,
) -> None:
    """Record that the call of ``idempotency_key`` has an unknown outcome, in one statement
    committed on its own (an upsert: the key's row is reopened if it had been settled)."""
    OutsideCall.objects.using(using).bulk_create(
        [
            OutsideCall(
                operation=operation,
                resource=resource[:200],
                endpoint=endpoint,
                idempotency_key=idempotency_key[:200],
                token=token,
                organization=organization,
                reason=reason[:200],
                actor=actor[:200],
                recorded_at=timezone.now(),
            )
        ],
        update_conflicts=True,
        unique_fields=["endpoint", "idempotency_key"],
        update_fields=[
            "operation",
            "resource",
            "token",
            "reason",
            "actor",
            "recorded_at",
            "settled_at",
            "settlement",
            "detail",
        ],
    )
