"""Annual budgets: one per organization and year, approved once, fenced on its own row."""

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from hoa.models import Organization
from hoa.tenancy import TenantQuerySet
from locking.models import FencedModel


class AnnualBudget(FencedModel):
    """What an association plans to spend in one year: drafted by staff, approved once (in
    the transaction that passes the fence its row carries)."""

    class Status(models.TextChoices):
        DRAFT = "draft", _("Draft")
        APPROVED = "approved", _("Approved")

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="budgets")
    year = models.PositiveSmallIntegerField(_("year"))
    amount = models.DecimalField(_("amount"), max_digits=14, decimal_places=2)
    status = models.CharField(
        _("status"), max_length=20, choices=Status.choices, default=Status.DRAFT
    )
    approved_at = models.DateTimeField(_("approved at"), null=True, blank=True)
    approved_by = models.CharField(_("approved by"), max_length=200, blank=True, default="")

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["organization__name", "-year"]
        permissions = [("approve_budget", "Can approve annual budgets")]
        constraints = [
            models.UniqueConstraint(fields=["organization", "year"], name="one_budget_per_year"),
            # Four digits: the year is part of the lease's resource name.
            models.CheckConstraint(condition=Q(year__range=(1, 9999)), name="budget_year_4_digits"),
            models.CheckConstraint(
                condition=Q(status="draft", approved_at__isnull=True)
                | Q(status="approved", approved_at__isnull=False),
                name="budget_approved_at_matches_status",
            ),
        ]

    def __str__(self):
        return f"{self.organization} · {self.year}"

    @property
    def is_approved(self) -> bool:
        return self.status == self.Status.APPROVED
