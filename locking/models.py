"""Audit of fenced attempts: every grant, refusal and rejection, kept outside the work's
transaction so that a rolled-back write still leaves its record."""

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from locking.outcomes import Outcome


class FencedModel(models.Model):
    """A row that carries a fence: only ``advance_fence`` ever writes ``last_fence_token``.

    A plain ``save()`` writes every column from the instance's copy, which may be minutes
    old (an admin form, a long request). Writing back an old token would move the fence
    backwards and let a stale holder's commit through, so ``save()`` on an existing row
    never includes ``last_fence_token``.

    (Models are the one thing imported from ``locking.models`` directly: Django must load
    them after the app registry, so ``locking/__init__.py`` cannot import them.)
    """

    last_fence_token = models.BigIntegerField(default=0, editable=False)

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            update_fields = kwargs.get("update_fields")
            if update_fields is None:
                update_fields = [
                    field.name for field in self._meta.concrete_fields if not field.primary_key
                ]
            kwargs["update_fields"] = [name for name in update_fields if name != "last_fence_token"]
        super().save(*args, **kwargs)


class FenceEventQuerySet(models.QuerySet):
    def for_resource(self, resource: str):
        return self.filter(resource=resource)

    def in_scopes(self, scopes):
        return self.filter(scope__in=list(scopes))


class FenceEvent(models.Model):
    resource = models.CharField(_("resource"), max_length=200, db_index=True)
    # Who may see the event: a caller-defined tag such as "org:12"; the locking app
    # knows nothing of organizations.
    scope = models.CharField(_("scope"), max_length=100, blank=True, default="", db_index=True)
    operation = models.CharField(_("operation"), max_length=50, blank=True, default="")
    token = models.BigIntegerField(_("fencing token"), null=True, blank=True)
    outcome = models.CharField(_("outcome"), max_length=20, choices=Outcome)
    actor = models.CharField(_("actor"), max_length=200, blank=True, default="")
    ip = models.GenericIPAddressField(_("IP address"), null=True, blank=True)
    detail = models.TextField(_("detail"), blank=True, default="")
    at = models.DateTimeField(_("at"), default=timezone.now, db_index=True)

    objects = FenceEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        # Deleting whichever lease a resource has is an operator's act (locking.break_lease).
        permissions = [("break_lease", _("Can break a stuck lease"))]
        indexes = [
            models.Index(fields=["resource", "-at"], name="fenceevent_resource_at"),
            models.Index(fields=["outcome", "-at"], name="fenceevent_outcome_at"),
        ]

    def __str__(self):
        return f"{self.resource} #{self.token} {self.outcome}"


class FenceEpoch(models.Model):
    """The last epoch of a resource's fencing tokens handed to Redis (see locking/epochs.py).

    Written only by ``begin_epoch``, before Redis hands out any token of the epoch. A row is
    never deleted: a resource whose row is gone would start again at epoch 0.
    """

    resource = models.CharField(_("resource"), max_length=200, primary_key=True)
    epoch = models.BigIntegerField(_("epoch"))
    started_at = models.DateTimeField(_("started at"))

    class Meta:
        verbose_name = _("fence epoch")

    def __str__(self):
        return f"{self.resource} epoch {self.epoch}"
