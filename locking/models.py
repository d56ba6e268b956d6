"""Audit of fenced attempts: every grant, refusal and rejection, kept outside the work's
transaction so that a rolled-back write still leaves its record."""

import json
from collections.abc import Iterable

from django.db import models
from django.db.models.base import ModelBase
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from locking.outcomes import Outcome


class FencedModel(models.Model):
    """A row that carries a fence: only ``advance_fence`` ever raises ``last_fence_token``.

    A plain ``save()`` writes every column from the instance's copy, which may be minutes
    old (an admin form, a long request), so ``save()`` on a row it loaded never includes
    ``last_fence_token``. What ``save()`` cannot see (an instance built by pk, which Django
    saves with an UPDATE of every column; ``update()``, ``bulk_update()``, ``loaddata``) the
    database holds: the fence guard's trigger keeps the column from going down
    (locking/guard.py; every fenced model's migrations install it, system check
    ``locking.E013``).

    (Models are the one thing imported from ``locking.models`` directly: Django must load
    them after the app registry, so ``locking/__init__.py`` cannot import them.)
    """

    last_fence_token = models.BigIntegerField(default=0, editable=False)

    class Meta:
        abstract = True

    def save(
        self,
        *,
        force_insert: bool | tuple[ModelBase, ...] = False,
        force_update: bool = False,
        using: str | None = None,
        update_fields: Iterable[str] | None = None,
    ) -> None:
        """Django's ``save()`` (its keyword-only signature, typed), never writing
        ``last_fence_token`` to a row it loaded."""
        if not self._state.adding:
            if update_fields is None:
                update_fields = [
                    field.name for field in self._meta.concrete_fields if not field.primary_key
                ]
            update_fields = [name for name in update_fields if name != "last_fence_token"]
        super().save(
            force_insert=force_insert,
            force_update=force_update,
            using=using,
            update_fields=update_fields,
        )


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


class LeaseHolder(FenceEvent):
    """The admin index's entry for the leases held now: no table and no rows of its own
    (a proxy), only a line in the index that leads to the holders page, which reads Redis.
    Without it the page was reachable only from a link on the fence events' list."""

    class Meta:
        proxy = True
        default_permissions = ()  # the page asks FenceEvent's permissions
        verbose_name = _("lease held now")
        verbose_name_plural = _("leases held now")


class FenceEpoch(models.Model):
    """A resource's durable record: the last epoch of its tokens handed to Redis
    (locking/epochs.py), and the newest token a fence committed, with its grant.

    ``epoch`` is written by ``begin_epoch``, before Redis hands out any token of the epoch;
    ``token`` and ``owner`` by every fence, in the same statement that fences the row
    (locking/fence.py). A row is never deleted: a resource whose row is gone would start
    again at epoch 0, and an older holder could fence it again.
    """

    resource = models.CharField(_("resource"), max_length=200, primary_key=True)
    epoch = models.BigIntegerField(_("epoch"))
    started_at = models.DateTimeField(_("started at"))
    token = models.BigIntegerField(_("newest fenced token"), default=0, db_default=0)
    # The grant (its lease's owner id) that fenced ``token``: the same grant may fence again.
    owner = models.CharField(_("fenced by grant"), max_length=64, default="", db_default="")

    class Meta:
        verbose_name = _("fence epoch")

    def __str__(self):
        return f"{self.resource} epoch {self.epoch}"


class ReceivedCall(models.Model):
    """The receiving side's record of one ``Idempotency-Key`` (locking/receiving/receiver.py): the
    highest fencing token accepted for it, what that call carried and what it was answered.

    Written only by ``receive_call``'s conditional statement: a call with a higher token
    replaces the record (``replaced_token`` is the one it superseded, ``replacements``
    counts them); a lower one changes nothing and is refused.
    """

    scope = models.CharField(_("receiver"), max_length=100)
    idempotency_key = models.CharField(_("idempotency key"), max_length=255)
    token = models.BigIntegerField(_("fencing token"))
    content_digest = models.CharField(_("content digest"), max_length=64)
    body = models.BinaryField(_("body"))
    replaced_token = models.BigIntegerField(_("replaced token"), null=True, blank=True)
    replacements = models.PositiveIntegerField(_("replacements"), default=0)
    answer_status = models.PositiveSmallIntegerField(_("answer status"), default=0)
    answer_content_type = models.CharField(_("answer content type"), max_length=200, blank=True)
    answer_body = models.BinaryField(_("answer body"), blank=True)
    first_received_at = models.DateTimeField(_("first received at"))
    received_at = models.DateTimeField(_("received at"))

    class Meta:
        verbose_name = _("received fenced call")
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "idempotency_key"], name="receivedcall_one_per_key"
            )
        ]

    def __str__(self):
        return f"{self.scope} {self.idempotency_key} #{self.token}"

    @property
    def payload(self) -> dict:
        """What the accepted call carried, its signed fields included."""
        return json.loads(bytes(self.body))


class ReceivedFence(models.Model):
    """A receiver's highest token per fenced resource, across the keys of that resource
    (``fenced_receiver(resource=…)``): a call of any key with a lower token is refused.

    A lease is per resource and its tokens count per resource, so one resource's keys can
    be compared (the dispatch of another vendor for the same complaint, sent under an
    older lease, is refused too); different resources' tokens never are.
    """

    scope = models.CharField(_("receiver"), max_length=100)
    resource = models.CharField(_("resource"), max_length=255)
    token = models.BigIntegerField(_("fencing token"))
    received_at = models.DateTimeField(_("received at"))

    class Meta:
        verbose_name = _("received fence")
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "resource"], name="receivedfence_one_per_resource"
            )
        ]

    def __str__(self):
        return f"{self.scope} {self.resource} #{self.token}"
