"""Refused requests and actions, kept for superusers (``hoa.security.audit`` writes them)."""

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hoa.models.organizations import Organization


class AccessDenial(models.Model):
    """A refused request or action: who, from where, what, why (``hoa.security.audit``).

    Refusals answered by a view, an admin page or a command before any fenced operation
    starts live here, not among the fenced attempts (``FenceEvent``): they concern no
    lease, and anyone who can send a request can cause one. Superusers read them in the
    admin.
    """

    class Reason(models.TextChoices):
        PERMISSION = "permission", _("Missing permission")
        TENANT = "tenant", _("Another association")
        RATE_LIMIT = "rate_limit", _("Rate limit")
        CSRF = "csrf", _("CSRF check failed")

    at = models.DateTimeField(_("at"), default=timezone.now, db_index=True)
    reason = models.CharField(_("reason"), max_length=20, choices=Reason.choices)
    actor = models.CharField(_("actor"), max_length=200)
    ip = models.GenericIPAddressField(_("IP address"), null=True, blank=True)
    # The association the refused request targeted, when there was one.
    organization = models.ForeignKey(
        Organization,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="access_denials",
    )
    operation = models.CharField(_("operation"), max_length=50, blank=True, default="")
    # The request path, or the command's name, or the fenced resource.
    resource = models.CharField(_("resource"), max_length=200)
    detail = models.TextField(_("detail"), blank=True, default="")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["reason", "-at"], name="accessdenial_reason_at")]

    def __str__(self):
        return f"{self.get_reason_display()} · {self.actor} · {self.resource}"
