"""Notices an association publishes to its residents (hoa/jobs/ publishes them)."""

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hoa.models.organizations import Organization, TenantQuerySet


class NoticeQuerySet(TenantQuerySet):
    def due(self, now=None):
        return self.filter(published_at__isnull=True, publish_at__lte=now or timezone.now())


class Notice(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="notices")
    title = models.CharField(_("title"), max_length=200)
    body = models.TextField(_("body"), blank=True, default="")
    publish_at = models.DateTimeField(_("publish at"), default=timezone.now)
    published_at = models.DateTimeField(_("published at"), null=True, blank=True)
    # Set by the delivery hook when it hands the notice on; published but not delivered
    # means a publisher died between its commit and the hook, and the next pass retries.
    delivered_at = models.DateTimeField(_("delivered at"), null=True, blank=True)

    objects = NoticeQuerySet.as_manager()

    class Meta:
        ordering = ["-publish_at"]
        indexes = [
            # The publisher's every-minute queries stay index scans as notices pile up.
            models.Index(
                fields=["publish_at"],
                name="notice_due_idx",
                condition=Q(published_at__isnull=True),
            ),
            models.Index(
                fields=["published_at"],
                name="notice_undelivered_idx",
                condition=Q(published_at__isnull=False, delivered_at__isnull=True),
            ),
        ]

    def __str__(self):
        return self.title
